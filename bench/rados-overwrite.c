/* rados-overwrite CONF POOL OBJECTS SECS QD
 *
 * The random-write peer of bench/rados.sh: 4 KiB writes at random 4 KiB
 * offsets into OBJECTS objects of 4 MiB (each written whole first), QD of
 * them in flight through librados's asynchronous writes, for SECS seconds;
 * prints the writes a second. `rados bench -b 4K` writes a new 4 KiB object
 * each time; a file system over 4 MiB objects, like a pool of rados devices,
 * asks the cluster for this instead, and an object store may serve the two
 * at different rates.
 *
 * Built by bench/rados.sh: cc -O2 -o rados-overwrite rados-overwrite.c -lrados
 */
#include <errno.h>
#include <rados/librados.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OBJECT (4u << 20)
#define WRITE 4096u

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int r) {
    fprintf(stderr, "rados-overwrite: %s: %s\n", what, strerror(r < 0 ? -r : r));
    return 1;
}

/* Starts a write of `buf` at a random block of a random object into slot `c`. */
static int start(rados_ioctx_t io, rados_completion_t *c, const char *buf, int objects) {
    char name[64];
    int r = rados_aio_create_completion2(NULL, NULL, c);
    if (r < 0)
        return r;
    snprintf(name, sizeof name, "overwrite.%d", rand() % objects);
    return rados_aio_write(io, name, *c, buf, WRITE, (uint64_t)(rand() % (OBJECT / WRITE)) * WRITE);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: rados-overwrite CONF POOL OBJECTS SECS QD\n");
        return 2;
    }
    int objects = atoi(argv[3]), qd = atoi(argv[5]);
    double secs = atof(argv[4]);
    if (objects < 1 || qd < 1 || secs <= 0) {
        fprintf(stderr, "rados-overwrite: OBJECTS and QD must be at least 1, SECS above 0\n");
        return 2;
    }
    rados_t cluster;
    rados_ioctx_t io;
    int r;
    if ((r = rados_create(&cluster, "admin")) < 0) return fail("create", r);
    if ((r = rados_conf_read_file(cluster, argv[1])) < 0) return fail(argv[1], r);
    if ((r = rados_connect(cluster)) < 0) return fail("connect", r);
    if ((r = rados_ioctx_create(cluster, argv[2], &io)) < 0) return fail(argv[2], r);

    char *whole = calloc(1, OBJECT), name[64], buf[WRITE];
    rados_completion_t *slots = calloc((size_t)qd, sizeof *slots);
    if (!whole || !slots) return fail("memory", ENOMEM);
    memset(buf, 0xab, sizeof buf);
    for (int i = 0; i < objects; i++) {
        snprintf(name, sizeof name, "overwrite.%d", i);
        if ((r = rados_write_full(io, name, whole, OBJECT)) < 0) return fail(name, r);
    }

    srand(1);
    long done = 0;
    double t0 = now(), end = t0 + secs;
    for (int i = 0; i < qd; i++)
        if ((r = start(io, &slots[i], buf, objects)) < 0) return fail("write", r);
    /* Waits on the slots in turn: writes complete about in the order they
     * left, and a finished slot starts its next write at once. */
    while (now() < end) {
        for (int i = 0; i < qd; i++) {
            rados_aio_wait_for_complete(slots[i]);
            if ((r = rados_aio_get_return_value(slots[i])) < 0) return fail("write", r);
            rados_aio_release(slots[i]);
            done++;
            if ((r = start(io, &slots[i], buf, objects)) < 0) return fail("write", r);
        }
    }
    double elapsed = now() - t0;
    for (int i = 0; i < qd; i++) {
        rados_aio_wait_for_complete(slots[i]);
        rados_aio_release(slots[i]);
    }
    printf("%.0f\n", (double)done / elapsed);
    for (int i = 0; i < objects; i++) {
        snprintf(name, sizeof name, "overwrite.%d", i);
        rados_remove(io, name);
    }
    rados_ioctx_destroy(io);
    rados_shutdown(cluster);
    free(whole);
    free(slots);
    return 0;
}
