#include "util/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

static int is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

static void print_usage(const CliSpec *spec, const char *program) {
    printf("usage: %s %s\n  %s\n", program, spec->synopsis, spec->about);
    int width = 0;
    for (int k = 0; k < spec->num_options; k++) {
        const CliOption *o = &spec->options[k];
        int w = (int)strlen(o->flag) + (o->value ? 1 + (int)strlen(o->value) : 0);
        if (w > width) width = w;
    }
    for (int k = 0; k < spec->num_options; k++) {
        const CliOption *o = &spec->options[k];
        char left[128];
        snprintf(left, sizeof left, "%s%s%s", o->flag, o->value ? " " : "", o->value ? o->value : "");
        printf("  %-*s  %s\n", width, left, o->help);
    }
    printf("  %-*s  %s\n", width, "--help", "print this and exit");
}

static CliResult report(const char *program, int speak, const char *fmt, va_list ap) {
    if (!speak) return CLI_ERROR;
    char message[1024];
    vsnprintf(message, sizeof message, fmt, ap);
    fflush(stdout);
    fprintf(stderr, "shardlab: %s (%s --help lists the flags)\n", message, program);
    return CLI_ERROR;
}

CliResult cli_error(const char *program, int speak, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    CliResult r = report(program, speak, fmt, ap);
    va_end(ap);
    return r;
}

// Stores `text` as option o's value; 0, or -1 with the problem in err.
static int set_value(const CliOption *o, const char *text, char *err, size_t err_len) {
    char *end;
    errno = 0;
    if (o->kind == CLI_STRING) {
        *(const char **)o->dest = text;
        return 0;
    }
    if (o->kind == CLI_FLOAT) {
        double v = strtod(text, &end);
        int underflow = errno == ERANGE && fabs(v) < 1;  // beyond even a double: 1e-400
        if (end == text || *end || !isfinite(v)) {
            snprintf(err, err_len, "%s: '%s' is not a finite number", o->flag, text);
            return -1;
        }
        if (v < o->min || v > o->max) {
            snprintf(err, err_len, "%s: %s is outside [%g, %g]", o->flag, text, o->min, o->max);
            return -1;
        }
        if (underflow || (v != 0 && (float)v == 0)) {
            snprintf(err, err_len, "%s: %s is too small for single precision (it would be 0; give 0 for none)",
                     o->flag, text);
            return -1;
        }
        *(float *)o->dest = (float)v;
        return 0;
    }
    // whole numbers in any notation: 7500000000, or 7.5e9 as the papers write it
    unsigned long long v = 0;
    int whole = 0;
    if (text[0] != '-' && text[0] != '+') {
        v = strtoull(text, &end, 10);
        whole = !errno && end != text && !*end;
    }
    if (!whole) {
        errno = 0;
        double d = strtod(text, &end);
        whole = !errno && end != text && !*end && d >= 0 && d < 0x1p64 && d == floor(d);
        if (whole) v = (unsigned long long)d;
    }
    if (!whole || (double)v < o->min || (double)v > o->max) {
        snprintf(err, err_len, "%s: '%s' is not an integer in [%.0f, %.0f]", o->flag, text, o->min, o->max);
        return -1;
    }
    if (o->kind == CLI_INT) *(int *)o->dest = (int)v;
    else *(uint64_t *)o->dest = (uint64_t)v;
    return 0;
}

// 1 if `arg` is a flag of spec that takes a value (the next argument is that value).
static int takes_value(const CliSpec *spec, const char *arg) {
    for (int k = 0; k < spec->num_options; k++)
        if (strcmp(arg, spec->options[k].flag) == 0) return spec->options[k].kind != CLI_SWITCH;
    return 0;
}

CliResult cli_parse(const CliSpec *spec, int argc, char **argv, int speak) {
    const char *program = argv[0];
    for (int i = 1; i < argc; i++) {  // --help as a flag, not as a flag's value (--log -h names a file)
        if (!is_help(argv[i]) || (i > 1 && takes_value(spec, argv[i - 1]))) continue;
        if (speak) print_usage(spec, program);
        return CLI_HELP;
    }
    if (spec->num_positional) *spec->num_positional = 0;
    if (spec->given) memset(spec->given, 0, (size_t)spec->num_options * sizeof *spec->given);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == '\0') {  // "-" alone names standard input
            if (!spec->num_positional || *spec->num_positional >= spec->max_positional)
                return cli_error(program, speak, "unexpected argument '%s'", arg);
            spec->positional[(*spec->num_positional)++] = arg;
            continue;
        }
        const CliOption *o = NULL;
        for (int k = 0; k < spec->num_options && !o; k++)
            if (strcmp(arg, spec->options[k].flag) == 0) o = &spec->options[k];
        if (!o) return cli_error(program, speak, "unknown flag '%s'", arg);
        for (int j = 1; j < i; j++)  // a flag given twice: which one would count is a guess, so neither does
            if (strcmp(argv[j], arg) == 0 && (j == 1 || !takes_value(spec, argv[j - 1])))
                return cli_error(program, speak, "%s given twice", arg);
        if (spec->given) spec->given[o - spec->options] = 1;
        if (o->kind == CLI_SWITCH) {
            *(int *)o->dest = 1;
            continue;
        }
        if (i + 1 >= argc) return cli_error(program, speak, "%s needs a value (%s)", arg, o->value);
        char err[512];
        if (set_value(o, argv[++i], err, sizeof err) != 0) return cli_error(program, speak, "%s", err);
    }
    return CLI_RUN;
}

int cli_given(const CliSpec *spec, const char *flag) {
    for (int k = 0; k < spec->num_options; k++)
        if (strcmp(spec->options[k].flag, flag) == 0) return spec->given[k];
    fatal("cli_given: %s is not a flag of this tool", flag);
}

void cli_parse_or_exit(const CliSpec *spec, int argc, char **argv) {
    CliResult r = cli_parse(spec, argc, argv, 1);
    if (r == CLI_HELP) exit(0);
    if (r == CLI_ERROR) exit(1);
}
