/* One of the corpus's make -j2 sources. */
int part1(int x) {
	int s = 0;
	for (int i = 0; i < x; i++)
		s += i * 1;
	return s;
}
