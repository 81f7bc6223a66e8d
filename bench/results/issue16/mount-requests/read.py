import os,time,sys
root=sys.argv[1]
t=time.perf_counter()
for d in range(10,30):
    for i in range(500):
        with open(f"{root}/d{d}/f{i}","rb") as f: f.read()
print("per file us", (time.perf_counter()-t)/10000*1e6)
