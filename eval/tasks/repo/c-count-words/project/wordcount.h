#ifndef WORDCOUNT_H
#define WORDCOUNT_H
int count_words(const char *s);
#endif
