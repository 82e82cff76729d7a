/* The memory calls `vmspace shadow` must mirror exactly: anonymous and file mappings, MAP_FIXED over a
 * mapping, partial munmap, mprotect splits, mremap grow/shrink/move, madvise, mlock, a named VMA, and threads
 * whose stacks glibc maps (and whose guard pages it protects). Built by crates/cli/tests/shadow.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

static void *worker(void *arg) {
	char *p = mmap(NULL, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	memset(p, (int)(long)arg, 8 * 4096);
	mprotect(p + 4096, 4096, PROT_READ);
	munmap(p, 8 * 4096);
	return NULL;
}

int main(int argc, char **argv) {
	const long pg = 4096;
	char *a = mmap(NULL, 16 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return 1;
	a[0] = 1;
	a[5 * pg] = 1;
	mprotect(a + 4 * pg, 4 * pg, PROT_READ);
	mprotect(a + 4 * pg, 4 * pg, PROT_READ | PROT_WRITE);
	munmap(a + 12 * pg, 2 * pg);
	mmap(a + 2 * pg, 2 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	madvise(a, 2 * pg, MADV_DONTNEED);
	madvise(a, 4 * pg, MADV_DONTFORK);
	madvise(a, 4 * pg, MADV_DOFORK);
	madvise(a + 8 * pg, 4 * pg, MADV_WIPEONFORK);
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, a + 8 * pg, 2 * pg, "shadowtest");
	mlock(a, 2 * pg);
	munlock(a, 2 * pg);
	char *b = mremap(a + 8 * pg, 4 * pg, 8 * pg, MREMAP_MAYMOVE);
	if (b != MAP_FAILED) {
		b[7 * pg] = 2;
		b = mremap(b, 8 * pg, 2 * pg, 0);
	}
	/* A file mapping, private and shared, of a temporary file. */
	char path[] = "/tmp/vmspace-shadow-XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0) {
		unlink(path);
		if (ftruncate(fd, 8 * pg) == 0) {
			char *f = mmap(NULL, 8 * pg, PROT_READ, MAP_PRIVATE, fd, 0);
			char *s = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 4 * pg);
			if (s != MAP_FAILED)
				s[0] = 3;
			if (f != MAP_FAILED)
				munmap(f + pg, pg);
		}
		close(fd);
	}
	/* Calls the kernel refuses: the same errno on both sides. */
	munmap(a + 1, pg);
	mprotect(a, pg, 0x100);
	mmap((void *)0x1000, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	pthread_t t[3];
	for (long i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	void *big = malloc(1 << 20);
	free(big);
	printf("ok\n");
	return 0;
}
