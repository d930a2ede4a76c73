# bash completion for mqctl, generated from the CLI by 'make docs' (python -m mqctl.docs).
# Source it, or install it as mqctl in a bash-completion completions directory.
_mqctl_completion() {
    local IFS=$'\n' line="${COMP_LINE:0:COMP_POINT}" word prefix
    COMPREPLY=($(env _MQCTL_COMPLETE_LINE="$line" _MQCTL_COMPLETE=complete_bash "$1" 2>/dev/null))
    # bash replaces only what follows a ':' in the word (COMP_WORDBREAKS): so do the answers
    word="${line##*[[:space:]]}"
    if [[ $word == *:* && $COMP_WORDBREAKS == *:* ]]; then
        prefix="${word%"${word##*:}"}"
        COMPREPLY=("${COMPREPLY[@]#"$prefix"}")
    fi
    return 0
}

complete -o default -F _mqctl_completion mqctl
