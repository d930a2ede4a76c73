# fish completion for mqctl, generated from the CLI by 'make docs' (python -m mqctl.docs).
# Put it in a directory of $fish_complete_path (~/.config/fish/completions), or source it.
function _mqctl_completion
    set -l line (commandline -cp | string collect)
    set -l answers (env _MQCTL_COMPLETE_LINE="$line" _MQCTL_COMPLETE=complete_fish mqctl 2>/dev/null)
    if test -z "$answers"
        __fish_complete_path (commandline -ct)  # nothing of mqctl's to offer: file names
        return
    end
    printf '%s\n' $answers
end

complete --command mqctl --no-files --arguments '(_mqctl_completion)'
