/* strata-agent's entry point; the program is strata_agent_main (agent.c). */
#include <stdio.h>

#include "agent.h"

int main(int argc, char **argv) { return strata_agent_main(argc, argv, stdin, stdout, stderr); }
