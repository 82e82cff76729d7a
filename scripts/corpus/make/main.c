/* The corpus's make -j2 program: links the parts and prints their sum. */
#include <stdio.h>
int part1(int), part2(int), part3(int), part4(int);
int main(void) {
	printf("%d\n", part1(10) + part2(10) + part3(10) + part4(10));
	return 0;
}
