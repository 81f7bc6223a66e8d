/* cephcmd CONF JSON: sends one monitor command, prints its output and status. */
#include <rados/librados.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: cephcmd CONF JSON\n"); return 2; }
    rados_t c; int r;
    if ((r = rados_create(&c, "admin")) < 0) { fprintf(stderr, "create %d\n", r); return 1; }
    if ((r = rados_conf_read_file(c, argv[1])) < 0) { fprintf(stderr, "conf %d\n", r); return 1; }
    rados_conf_set(c, "client_mount_timeout", "10");
    if ((r = rados_connect(c)) < 0) { fprintf(stderr, "connect %s\n", strerror(-r)); return 1; }
    const char *cmd[1] = { argv[2] };
    char *out = NULL, *st = NULL; size_t ol = 0, sl = 0;
    r = rados_mon_command(c, cmd, 1, "", 0, &out, &ol, &st, &sl);
    if (ol) fwrite(out, 1, ol, stdout);
    if (ol && out[ol-1] != '\n') putchar('\n');
    if (sl) { fwrite(st, 1, sl, stderr); fputc('\n', stderr); }
    rados_buffer_free(out); rados_buffer_free(st);
    rados_shutdown(c);
    return r < 0 ? 1 : 0;
}
