/*
 * itx-corpus: deterministic, English-like text for the compression workload.
 *
 *   itx-corpus --bytes N[K|M|G] [--seed S]      (writes exactly N bytes to stdout)
 *
 * Stands in for the study's enwik9: text whose xz -2 ratio is like English prose (≈3.5-4.5x),
 * generated in memory so no data set has to be shipped or read from disk. The same arguments
 * give the same bytes on every machine: only 64-bit integer arithmetic is used (no floating
 * point, no libm, no locale), so compiler, libc and CPU cannot change the output.
 *
 * PRNG: SplitMix64 (Steele, Lea & Flood 2014; the seeding generator of java.util.SplittableRandom
 * and of xoshiro): state += 0x9E3779B97F4A7C15, then the output mix
 *   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
 *   z ^= z >> 31.
 * Initial state = the seed. One stream drives everything, in a fixed order:
 *   1. the vocabulary: VOCAB words; word r (its frequency rank) gets a length from an
 *      English-like length table, capped at 2 + log2(r + 1) so frequent words are short,
 *      letters from English letter frequencies; about 1 in 16 words is a proper noun
 *      (always capitalised);
 *      then, for every word, NSUCC "usual successors" drawn from the Zipf weights below
 *      (English repeats word pairs and phrases; that is what an LZ compressor finds);
 *   2. the text: each word is, with probability P_FOLLOW %, one of the previous word's
 *      successors (successor j weighted 1000 / (j + 1)), else a fresh draw with
 *      Zipf-Mandelbrot weights w(r) = 2^40 / (10 r + 27) (exponent 1, offset 2.7, as fitted
 *      to English); sentences of 4-23 words with commas, an
 *      occasional number, ". ", "? " or "! " endings, paragraphs of 2-7 sentences each ending
 *      in a line break, a blank line between paragraphs.
 * VOCAB, NSUCC and P_FOLLOW were tuned so xz -2 compresses the text ≈3.8x and gzip -6 ≈3.0x
 * (seeds 1 and 7, 64 MiB), like English prose.
 * A draw "uniform below n" is next() % n (the tiny modulo bias is part of the definition).
 * Changing any of this changes the corpus: bump CORPUS_VERSION, which --version prints.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CORPUS_VERSION 1
#define VOCAB 30000
#define MAXWORD 16
#define NSUCC 4
#define P_FOLLOW 85

static uint64_t state;

static uint64_t next(void) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t n) { return next() % n; }

/* Draw an index from cumulative integer weights (binary search). */
static int pick(const uint64_t *cum, int n) {
    uint64_t u = below(cum[n - 1]);
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cum[mid] > u) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* English letter frequencies, per 1000 (a..z). */
static const uint64_t LETTER_W[26] = {82, 15, 28, 43, 127, 22, 20, 61, 70, 2, 8, 40, 24,
                                      67, 75, 19, 1, 60, 63, 91, 28, 10, 24, 2, 20, 1};
/* Word lengths 1..12 in running English text, percent. */
static const uint64_t LEN_W[12] = {3, 17, 20, 16, 11, 9, 8, 6, 4, 3, 2, 1};

static char words[VOCAB][MAXWORD];
static unsigned char wlen[VOCAB];
static unsigned char proper[VOCAB];
static uint64_t zipf_cum[VOCAB];
static int succ[VOCAB][NSUCC];
static uint64_t succ_cum[NSUCC];

static int ilog2(uint64_t x) { int r = 0; while (x >>= 1) r++; return r; }

static void make_vocabulary(void) {
    uint64_t letter_cum[26], len_cum[12], acc = 0;
    for (int i = 0; i < 26; i++) letter_cum[i] = (acc += LETTER_W[i]);
    acc = 0;
    for (int i = 0; i < 12; i++) len_cum[i] = (acc += LEN_W[i]);
    acc = 0;
    for (int r = 0; r < VOCAB; r++) {
        int len = pick(len_cum, 12) + 1;
        int cap = 2 + ilog2((uint64_t)r + 1);
        if (len > cap) len = cap;
        for (int k = 0; k < len; k++) words[r][k] = (char)('a' + pick(letter_cum, 26));
        wlen[r] = (unsigned char)len;
        proper[r] = r > 100 && below(16) == 0;
        zipf_cum[r] = (acc += (1ULL << 40) / (10ULL * (uint64_t)r + 27));
    }
    for (int r = 0; r < VOCAB; r++)
        for (int j = 0; j < NSUCC; j++) succ[r][j] = pick(zipf_cum, VOCAB);
    acc = 0;
    for (int j = 0; j < NSUCC; j++) succ_cum[j] = (acc += 1000 / ((uint64_t)j + 1));
}

/* Output buffer; emit() stops the program once exactly `remaining` bytes are written. */
static char buf[1 << 16];
static size_t used;
static uint64_t remaining;

static void flush_out(void) {
    size_t off = 0;
    while (off < used) {
        ssize_t w = write(STDOUT_FILENO, buf + off, used - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EPIPE) exit(0);  /* reader is done (e.g. `| head`) */
            perror("itx-corpus: write");
            exit(1);
        }
        off += (size_t)w;
    }
    used = 0;
}

static void emit(const char *s, size_t n) {
    while (n > 0) {
        if (remaining == 0) { flush_out(); exit(0); }
        size_t room = sizeof buf - used;
        size_t k = n < room ? n : room;
        if (k > remaining) k = (size_t)remaining;
        memcpy(buf + used, s, k);
        used += k; s += k; n -= k; remaining -= k;
        if (used == sizeof buf) flush_out();
    }
    if (remaining == 0) { flush_out(); exit(0); }
}

static void emit_word(int r, int capital) {
    char w[MAXWORD];
    memcpy(w, words[r], wlen[r]);
    if (capital || proper[r]) w[0] = (char)(w[0] - 'a' + 'A');
    emit(w, wlen[r]);
}

static int parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-') return -1;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') { mul = 1ULL << 10; end++; }
    else if (*end == 'M') { mul = 1ULL << 20; end++; }
    else if (*end == 'G') { mul = 1ULL << 30; end++; }
    if (*end != '\0') return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: itx-corpus --bytes N[K|M|G] [--seed S]   (text on stdout)\n");
}

int main(int argc, char **argv) {
    uint64_t nbytes = 0, seed = 0;
    int have_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("itx-corpus %d\n", CORPUS_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &nbytes) != 0) { usage(); return 2; }
            have_bytes = 1;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &seed) != 0) { usage(); return 2; }
        } else {
            usage();
            return 2;
        }
    }
    if (!have_bytes) { usage(); return 2; }
    if (nbytes == 0) return 0;

    state = seed;
    remaining = nbytes;
    make_vocabulary();
    int prev = -1;  /* previous word, for the successor chains (numbers keep it) */
    for (;;) {
        int sentences = 2 + (int)below(6);
        for (int s = 0; s < sentences; s++) {
            int nwords = 4 + (int)below(20);
            for (int k = 0; k < nwords; k++) {
                if (k > 0) emit(" ", 1);
                if (below(50) == 0) {
                    char num[24];
                    int n = snprintf(num, sizeof num, "%d", (int)(1800 + below(230)));
                    emit(num, (size_t)n);
                } else {
                    int w = (prev >= 0 && (int)below(100) < P_FOLLOW)
                                ? succ[prev][pick(succ_cum, NSUCC)]
                                : pick(zipf_cum, VOCAB);
                    emit_word(w, k == 0);
                    prev = w;
                }
                if (k + 1 < nwords && below(12) == 0) emit(",", 1);
            }
            uint64_t e = below(20);
            emit(e == 0 ? "?" : e == 1 ? "!" : ".", 1);
            emit(s + 1 < sentences ? " " : "\n", 1);
        }
        emit("\n", 1);
    }
}
