// cli.h: the command line every tool shares. A tool lists its flags in a table;
// cli_parse fills in their values, answers --help (or -h) with the usage on
// stdout, and refuses unknown flags, missing values and numbers that are not
// whole, finite or in range, naming the flag.
#ifndef SHARDLAB_CLI_H
#define SHARDLAB_CLI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CLI_STRING, CLI_INT, CLI_UINT64, CLI_FLOAT, CLI_SWITCH } CliKind;

typedef struct {
    const char *flag;   // "--batch"
    const char *value;  // the value's name in the usage ("B"); NULL for a switch
    CliKind kind;
    void *dest;         // const char **, int *, uint64_t *, float *; a switch sets an int to 1
    double min, max;    // numbers: the accepted range, both ends included
    const char *help;   // one line of usage
} CliOption;

typedef struct {
    const char *synopsis;     // the usage line after the program name
    const char *about;        // what the tool does, one line
    const CliOption *options;
    int num_options;
    const char **positional;  // (max_positional) where arguments that are not flags go
    int max_positional;       // 0: none allowed
    int *num_positional;      // how many were given (may be NULL when max_positional is 0)
    int *given;               // optional (num_options): set to 1 for each flag the command line gives
} CliSpec;

typedef enum { CLI_RUN, CLI_HELP, CLI_ERROR } CliResult;

// Parses argv[1..] into the options' destinations (untouched when not given).
// Returns CLI_RUN; or CLI_HELP after printing the usage on stdout; or CLI_ERROR
// after printing the problem on stderr. Prints only when `speak` is set: every
// rank of an MPI job parses the same argv, and rank 0 alone reports.
CliResult cli_parse(const CliSpec *spec, int argc, char **argv, int speak);

// 1 when the command line gave `flag` (spec->given must be set).
int cli_given(const CliSpec *spec, const char *flag);

// cli_parse for a single-process tool: exits 0 after --help and 1 after an error.
void cli_parse_or_exit(const CliSpec *spec, int argc, char **argv);

// Reports a problem found after parsing (a missing flag, flags that do not go
// together) the way cli_parse reports its own, when `speak`; returns CLI_ERROR.
CliResult cli_error(const char *program, int speak, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
