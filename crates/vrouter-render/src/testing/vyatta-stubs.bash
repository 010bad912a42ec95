# Stub vyatta configure-mode functions for running a vrouter apply script under
# plain bash (vrouter-render test support). Load it before the script: sourced,
# or through BASH_ENV. Every record goes to "$VROUTER_STUB_LOG" as NUL-terminated
# fields (bash values cannot hold NUL, so the framing is unambiguous), each
# newline in a field written as the byte 0xFF:
#   CALL <name> <argc> <args...>   a stubbed command and its exact arguments
#   LOAD <bytes>                   what `load /dev/stdin` read
#   TRACE <depth> <command>        every command the script itself runs (depth:
#                                  subshell nesting, 1 inside `$( )`)
# `id -g -n` prints "$VROUTER_STUB_GROUP" (default vyattacfg, which skips the
# script's `sg` re-exec). Each stub is one command, so the trace costs little.
#
# Why 0xFF: the sides of a pipeline and a `&` job log at the same time, and
# bash's printf flushes its line-buffered output at every newline, so a record
# holding one would be written in pieces that another process's record can land
# between. Without newlines a record is one write(2) (up to the 4 KiB buffer;
# the records written concurrently in the tests are far shorter). 0xFF never
# occurs in UTF-8 text, and the log is read as UTF-8.
__vr_nl=$'\n'
__vr_ff=$'\377'

configure() { printf '%s\0' CALL configure "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }
commit() { printf '%s\0' CALL commit "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }
save() { printf '%s\0' CALL save "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }
set() { printf '%s\0' CALL set "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }
delete() { printf '%s\0' CALL delete "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }
id() { printf '%s\n' "${VROUTER_STUB_GROUP-vyattacfg}"; }

# The real script-template defines the functions above; nothing else is sourced.
source() { printf '%s\0' CALL source "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"; }

load() {
    printf '%s\0' CALL load "$#" "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"
    if [ "$#" -eq 1 ] && [ "$1" = /dev/stdin ]; then
        local __vr_data=''
        IFS= read -r -d '' __vr_data
        printf '%s\0' LOAD "${__vr_data//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"
    fi
    return 0
}

# Trace every command outside these functions, including inside `$( )`.
__vr_arm() {
    __vr_base_depth=$BASH_SUBSHELL
    builtin set -o functrace
    trap '[ "${#FUNCNAME[@]}" -eq 0 ] && printf "%s\0" TRACE "$((BASH_SUBSHELL - __vr_base_depth))" "${BASH_COMMAND//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"' DEBUG
}

# A harness that loads the stubs once and arms the trace per script sets
# VROUTER_STUB_ARM=0.
if [ "${VROUTER_STUB_ARM-1}" = 1 ]; then __vr_arm; fi
