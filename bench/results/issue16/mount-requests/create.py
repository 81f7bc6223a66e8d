import os,time,sys
root=sys.argv[1]; data=os.urandom(4096)
for d in range(10): os.makedirs(f"{root}/c{d}", exist_ok=True)
t=time.perf_counter()
for d in range(10):
    for i in range(1000):
        fd=os.open(f"{root}/c{d}/f{i}", os.O_CREAT|os.O_WRONLY|os.O_TRUNC, 0o644); os.write(fd,data); os.close(fd)
t1=time.perf_counter()
fd=os.open(root, os.O_RDONLY); os.fsync(fd); os.close(fd)
t2=time.perf_counter()
print("per file us", (t1-t)/10000*1e6, "fsync ms", (t2-t1)*1e3)
