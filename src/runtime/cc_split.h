/* cc_split.h — compile a large generated program as parallel translation
 * units linked into one shared object (cc_split.c). */
#ifndef KILN_CC_SPLIT_H
#define KILN_CC_SPLIT_H

#include <stddef.h>

/* how many parts a source of src_len bytes is worth cutting into on a
 * machine with this many cores (1: compile it whole) */
int rt_cc_split_parts(size_t src_len, int cores);

/* compile src as nparts translation units at once with `cc flags -c` and
 * link them with `cc -shared` into out_so; temporary files are named
 * tmp_base.pN.{c,o} and removed. 0 on success; nonzero (nothing at out_so)
 * when the source cannot be cut or any step fails: compile it whole then. */
int rt_cc_split_build(const char *src, int nparts, const char *cc, const char *flags, const char *out_so,
                      const char *tmp_base);

/* wall seconds a build takes per byte of emitted C, learnt from this
 * process's compiles (cpu.c): the estimate of a program's recompile */
double rt_cc_seconds_per_byte(void);
/* 1 once a real compile of this process taught rt_cc_seconds_per_byte (its
 * rate then holds the machine's load at that time) */
int rt_cc_rate_learnt(void);
/* after a search's recompile: its seconds per unit byte over the machine's
 * slowdown measured then, remembered for this machine and compiler (a file
 * in the kernel cache), the rate a later process starts from */
void rt_cc_rate_remember(double alone_rate);
/* the next compile on this thread (rt_cpu_compile) is a whole program's:
 * only such a build teaches the rate (a search's candidate units do not) */
void rt_cc_next_is_program(void);

#endif
