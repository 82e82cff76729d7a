/* The memory calls of real programs that the corpus's other programs do not make, one scenario per argument:
 *   stacks   threads on stacks with guard pages (glibc's and a caller-given one), a MAP_GROWSDOWN mapping that
 *            faults grow, deep recursion that grows the main stack
 *   remap    a buffer grown by mremap to 64 MiB (moved when it cannot grow in place), touched as it grows
 *   jit      W^X: a code buffer written RW, flipped to RX and run, many times; mseal; protection keys
 *            (pkey_alloc fails with ENOSPC or EINVAL without PKU, and that result is mirrored too)
 *   madvise  MADV_DONTNEED, MADV_FREE, MADV_GUARD_INSTALL/REMOVE (Linux 6.13+), MAP_FIXED over existing mappings
 *   fork     fork with MADV_WIPEONFORK and MADV_DONTFORK ranges, the child touching and unmapping its copy
 * Built and run by scripts/corpus/run under `vmspace shadow`. Exit status 0 when every step did what Linux
 * documents; a step's unexpected result prints its name and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif
#ifndef SYS_mseal
#define SYS_mseal 462
#endif

#define PG 4096L

static int fail(const char *what) {
	fprintf(stderr, "memcorpus: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *thread_body(void *arg) {
	volatile char buf[64 * 1024];
	memset((char *)buf, (int)(intptr_t)arg, sizeof buf);
	void *p = malloc(100000 + 1000 * (intptr_t)arg);
	free(p);
	return (void *)(intptr_t)buf[100];
}

static long recurse(int depth) {
	volatile char frame[4096];
	frame[0] = (char)depth;
	if (depth == 0)
		return frame[0];
	return recurse(depth - 1) + frame[0];
}

static int stacks(void) {
	pthread_t t[4];
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setguardsize(&a, 4 * PG);
	pthread_attr_setstacksize(&a, 256 * 1024);
	for (intptr_t i = 0; i < 4; i++)
		if (pthread_create(&t[i], i % 2 ? &a : NULL, thread_body, (void *)i))
			fail("pthread_create");
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	/* A stack the caller maps, guard page below it. */
	char *s = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (s == MAP_FAILED)
		fail("mmap stack");
	if (mprotect(s, PG, PROT_NONE))
		fail("mprotect guard");
	pthread_attr_t b;
	pthread_attr_init(&b);
	pthread_attr_setstack(&b, s + PG, 63 * PG);
	pthread_t u;
	if (pthread_create(&u, &b, thread_body, (void *)9))
		fail("pthread_create on a given stack");
	pthread_join(u, NULL);
	munmap(s, 64 * PG);
	/* MAP_GROWSDOWN: faults below it grow it, page by page. */
	/* Placed at the top of a free 4 MiB hole: growth stops at the stack guard gap (1 MiB) above the
	 * accessible VMA below it. */
	char *hole = mmap(NULL, 1024 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (hole == MAP_FAILED || munmap(hole, 1024 * PG))
		fail("mmap hole");
	char *g = mmap(hole + 1020 * PG, 4 * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_GROWSDOWN | MAP_FIXED_NOREPLACE, -1, 0);
	if (g == MAP_FAILED)
		fail("mmap growsdown");
	g[0] = 1;
	for (int i = 1; i <= 8; i++) {
		g[-i * PG] = (char)i;
		/* A call between the faults: the shadow mirrors the growth before it. */
		madvise(g + PG, PG, MADV_NORMAL);
	}
	munmap(g - 8 * PG, 12 * PG);
	/* The main stack grows by 1 MiB of frames. */
	return recurse(256) == 0x7fffffff;
}

static int remap(void) {
	size_t size = 64 * 1024;
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		fail("mmap");
	memset(p, 1, size);
	/* A neighbour above now and then, so that some growths move. */
	void *block[16];
	int nb = 0;
	while (size < 64L << 20) {
		size_t n = size * 2;
		char *q = mremap(p, size, n, MREMAP_MAYMOVE);
		if (q == MAP_FAILED)
			fail("mremap grow");
		for (size_t off = size; off < n; off += PG)
			q[off] = 2;
		if (q[0] != 1)
			fail("mremap lost contents");
		p = q;
		size = n;
		if (nb < 16) {
			block[nb] = mmap(p + size, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			if (block[nb] != MAP_FAILED)
				nb++;
		}
	}
	/* Shrink in place, then move to a fixed place. */
	char *q = mremap(p, size, size / 4, 0);
	if (q == MAP_FAILED)
		fail("mremap shrink");
	char *dst = mmap(NULL, size / 4, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	q = mremap(q, size / 4, size / 4, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	if (q == MAP_FAILED)
		fail("mremap fixed");
	munmap(q, size / 4);
	for (int i = 0; i < nb; i++)
		munmap(block[i], PG);
	return 0;
}

typedef int (*fn_t)(int);

static int jit(void) {
	/* x86-64: mov eax, edi; add eax, imm32; ret */
	unsigned char code[] = {0x89, 0xf8, 0x05, 0, 0, 0, 0, 0xc3};
	size_t len = 16 * PG;
	unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		fail("mmap code");
	for (int i = 0; i < 64; i++) {
		size_t at = (size_t)(i % 16) * PG;
		if (mprotect(buf + at, PG, PROT_READ | PROT_WRITE))
			fail("mprotect RW");
		code[3] = (unsigned char)i;
		memcpy(buf + at, code, sizeof code);
		if (mprotect(buf + at, PG, PROT_READ | PROT_EXEC))
			fail("mprotect RX");
		if (((fn_t)(void *)(buf + at))(1) != 1 + i)
			fail("jitted code");
	}
	munmap(buf, len);
	/* mseal: a sealed mapping refuses munmap and mprotect with EPERM. */
	char *s = mmap(NULL, 4 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED)
		fail("mmap to seal");
	if (syscall(SYS_mseal, s + PG, 2 * PG, 0) == 0) {
		if (munmap(s, 4 * PG) == 0 || errno != EPERM)
			fail("munmap of a sealed range");
		if (mprotect(s + PG, PG, PROT_READ | PROT_WRITE) == 0 || errno != EPERM)
			fail("mprotect of a sealed range");
		munmap(s, PG);
		munmap(s + 3 * PG, PG);
	}
	/* Protection keys: without PKU pkey_alloc fails (ENOSPC/EINVAL); with it, a key is applied and freed. */
	long key = syscall(SYS_pkey_alloc, 0, 0);
	char *k = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (key >= 0) {
		syscall(SYS_pkey_mprotect, k + PG, PG, PROT_READ, key);
		syscall(SYS_pkey_free, key);
	} else {
		syscall(SYS_pkey_mprotect, k + PG, PG, PROT_READ, 1L);
		syscall(SYS_pkey_free, 1L);
	}
	syscall(SYS_pkey_mprotect, k, PG, PROT_READ, -1L);
	munmap(k, 4 * PG);
	return 0;
}

static int advise(void) {
	size_t len = 256 * PG;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		fail("mmap");
	memset(p, 7, len);
	if (madvise(p, 64 * PG, MADV_DONTNEED))
		fail("MADV_DONTNEED");
	if (p[0] != 0)
		fail("DONTNEED kept contents");
	if (madvise(p + 64 * PG, 64 * PG, MADV_FREE))
		fail("MADV_FREE");
	p[64 * PG] = 3;
	/* Guard regions: a fault there is SIGSEGV; the VMA is not split. Refused before 6.13 (EINVAL). */
	if (madvise(p + 128 * PG, 4 * PG, MADV_GUARD_INSTALL) == 0) {
		if (madvise(p + 128 * PG, 2 * PG, MADV_GUARD_REMOVE))
			fail("MADV_GUARD_REMOVE");
		p[128 * PG] = 1;
	}
	/* MAP_FIXED over the middle of it, then over a part of that and of its neighbour. */
	char *f = mmap(p + 160 * PG, 32 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (f != p + 160 * PG)
		fail("MAP_FIXED");
	f = mmap(p + 176 * PG, 32 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (f != p + 176 * PG)
		fail("MAP_FIXED over two");
	f[0] = 5;
	/* Over a file mapping of /proc/self/exe's first page. */
	FILE *exe = fopen("/proc/self/exe", "r");
	if (exe) {
		char *m = mmap(p + 220 * PG, PG, PROT_READ, MAP_PRIVATE | MAP_FIXED, fileno(exe), 0);
		if (m == MAP_FAILED || m[1] != 'E')
			fail("MAP_FIXED file");
		fclose(exe);
	}
	madvise(p, len, MADV_COLD);
	madvise(p, len, MADV_WILLNEED);
	munmap(p, len);
	return 0;
}

static int forks(void) {
	size_t len = 32 * PG;
	char *w = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *d = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED || d == MAP_FAILED || s == MAP_FAILED)
		fail("mmap");
	memset(w, 1, len);
	memset(d, 2, len);
	memset(s, 3, len);
	if (madvise(w + 8 * PG, 16 * PG, MADV_WIPEONFORK))
		fail("MADV_WIPEONFORK");
	if (madvise(d, 8 * PG, MADV_DONTFORK))
		fail("MADV_DONTFORK");
	for (int round = 0; round < 3; round++) {
		pid_t c = fork();
		if (c < 0)
			fail("fork");
		if (c == 0) {
			if (w[8 * PG] != 0 || w[0] != 1)
				_exit(2);
			w[0] = 9;
			s[0] = 9;
			char *x = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			x[0] = 1;
			munmap(w, len);
			_exit(0);
		}
		int st;
		waitpid(c, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || w[0] != 1 || s[0] != 9)
			fail("fork child");
		s[0] = 3;
	}
	munmap(w, len);
	munmap(d, len);
	munmap(s, len);
	return 0;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: memcorpus stacks|remap|jit|madvise|fork\n");
		return 2;
	}
	const char *m = argv[1];
	if (!strcmp(m, "stacks"))
		return stacks();
	if (!strcmp(m, "remap"))
		return remap();
	if (!strcmp(m, "jit"))
		return jit();
	if (!strcmp(m, "madvise"))
		return advise();
	if (!strcmp(m, "fork"))
		return forks();
	fprintf(stderr, "memcorpus: unknown scenario %s\n", m);
	return 2;
}
