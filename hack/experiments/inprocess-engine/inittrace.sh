#!/bin/sh
# usage: inittrace.sh BIN ARGS... : number of inits, sum of their clock ms, end of init (@start+clock of the last)
GODEBUG=inittrace=1 "$@" 2>&1 >/dev/null | awk '/^init /{n++; t=$5; s+=t; st=substr($3,2)+0; e=st+t; if(e>end)end=e} END{printf "%d inits, sum %.1f ms, init done at %.1f ms\n", n, s, end}'
