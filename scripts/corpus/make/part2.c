/* One of the corpus's make -j2 sources. */
int part2(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += i * 2;
	return s;
}
