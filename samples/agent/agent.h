/* strata-agent: a command-line agent that embeds libstrata through the C ABI
 * only. See agent.c. */
#ifndef STRATA_SAMPLES_AGENT_AGENT_H_
#define STRATA_SAMPLES_AGENT_AGENT_H_

#include <stdio.h>

/* The whole program: parses argv, writes the conversation to `out` and
 * diagnostics to `err`, reads interactive input from `in`. Returns the exit
 * code. A separate function (main.c only calls it) so a test can run the app
 * in-process. */
int strata_agent_main(int argc, char **argv, FILE *in, FILE *out, FILE *err);

#endif /* STRATA_SAMPLES_AGENT_AGENT_H_ */
