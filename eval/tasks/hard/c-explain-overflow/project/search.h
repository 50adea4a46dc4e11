#ifndef SEARCH_H
#define SEARCH_H
unsigned lower_bound(const unsigned *a, unsigned n, unsigned x);
unsigned midpoint(unsigned a, unsigned b);
#endif
