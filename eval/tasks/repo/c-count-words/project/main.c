#include <stdio.h>
#include "wordcount.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) printf("%d\n", count_words(argv[i]));
    return 0;
}
