#include "wordcount.h"

/* Counts the words of s: runs of characters other than spaces, tabs and newlines. */
int count_words(const char *s) {
    int n = 0;
    int in_word = 0;
    for (; *s; s++) {
        int space = (*s == ' ' || *s == '\t' || *s == '\n');
        if (space) {
            n++;
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;

        }
    }
    return n + in_word;
}
