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
# Writes one record. Under LC_ALL=C: in a UTF-8 locale bash's pattern
# substitution is quadratic (55 s for a 1.5 MB config), byte by byte it is not,
# and a newline byte is never part of a multibyte character. The stubs call it
# only for a record holding a newline: a function call costs the trace a little.
__vr_write() {
    local LC_ALL=C
    printf '%s\0' "${@//$__vr_nl/$__vr_ff}" >>"$VROUTER_STUB_LOG"
}

configure() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL configure "$#" "$@"; else printf '%s\0' CALL configure "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }
commit() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL commit "$#" "$@"; else printf '%s\0' CALL commit "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }
save() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL save "$#" "$@"; else printf '%s\0' CALL save "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }
set() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL set "$#" "$@"; else printf '%s\0' CALL set "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }
delete() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL delete "$#" "$@"; else printf '%s\0' CALL delete "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }
id() { printf '%s\n' "${VROUTER_STUB_GROUP-vyattacfg}"; }

# The real script-template defines the functions above; nothing else is sourced.
source() { if [[ $* == *$__vr_nl* ]]; then __vr_write CALL source "$#" "$@"; else printf '%s\0' CALL source "$#" "$@" >>"$VROUTER_STUB_LOG"; fi; }

load() {
    if [[ $* == *$__vr_nl* ]]; then __vr_write CALL load "$#" "$@"; else printf '%s\0' CALL load "$#" "$@" >>"$VROUTER_STUB_LOG"; fi
    if [ "$#" -eq 1 ] && [ "$1" = /dev/stdin ]; then
        local __vr_data=''
        IFS= read -r -d '' __vr_data
        __vr_write LOAD "$__vr_data"
    fi
    return 0
}

# Trace every command outside these functions, including inside `$( )`.
__vr_arm() {
    __vr_base_depth=$BASH_SUBSHELL
    builtin set -o functrace
    trap '[ "${#FUNCNAME[@]}" -eq 0 ] && if [[ $BASH_COMMAND == *$__vr_nl* ]]; then __vr_write TRACE "$((BASH_SUBSHELL - __vr_base_depth))" "$BASH_COMMAND"; else printf "%s\0" TRACE "$((BASH_SUBSHELL - __vr_base_depth))" "$BASH_COMMAND" >>"$VROUTER_STUB_LOG"; fi' DEBUG
}

# A harness that loads the stubs once and arms the trace per script sets
# VROUTER_STUB_ARM=0.
if [ "${VROUTER_STUB_ARM-1}" = 1 ]; then __vr_arm; fi
