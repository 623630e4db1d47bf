package commands

import (
	"io"

	"github.com/urfave/cli/v2"
)

// completionCommand is `completion`: print a bash or zsh completion script.
func completionCommand() *cli.Command {
	return &cli.Command{
		Name: "completion", Usage: "print a shell completion script: source <(pulumi-operator completion bash)",
		ArgsUsage: "bash|zsh",
		Action:    printCompletion,
	}
}

// bashCompletion drives urfave/cli's --generate-bash-completion. urfave/cli v2 ships this
// script only as a file in its repository, not in the module's API, hence a copy here.
const bashCompletion = `_pulumi_operator_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  opts=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _pulumi_operator_complete pulumi-operator
`

// printCompletion writes the script for the shell named by the first argument; no or another
// shell exits ExitInvalidInput.
func printCompletion(c *cli.Context) error {
	switch c.Args().First() {
	case "bash":
		_, err := io.WriteString(c.App.Writer, bashCompletion)
		return err
	case "zsh":
		_, err := io.WriteString(c.App.Writer, "autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion)
		return err
	}
	return cli.Exit("completion: name a shell: bash or zsh", ExitInvalidInput)
}
