"""The bash allowlist validator: what passes, what is refused, and under which rule.

These are string-level checks (defence in depth). That refused or accepted commands stay
contained by the sandbox is shown in test_tools_exec.py.
"""

from __future__ import annotations

import pytest

from sandbox.tools.bash import DEFAULT_BASH_ALLOWLIST, BashRefused, allowlist_from, validate_bash

ALLOWED = [
    ("cat notes.txt", ("cat",)),
    ("cat data.csv | sort | uniq -c | sort -rn | head -n 5", ("cat", "sort", "uniq", "head")),
    ("grep -c x a.txt && echo found || echo missing", ("grep", "echo")),
    ("echo one; echo two", ("echo",)),
    ("(head -n 1 a.txt; tail -n 1 a.txt) | wc -l", ("head", "tail", "wc")),
    ("{ echo a; echo b; } > out.txt", ("echo",)),
    ("echo hi > /workspace/ok.txt 2>&1", ("echo",)),
    ("echo hi >> logs/run.log 2> /dev/null", ("echo",)),
    ("cat < input.txt", ("cat",)),
    (
        'curl -s -H "Authorization: Bearer ${API_KEY}" https://api.example.com | jq .items',
        ("curl", "jq"),
    ),
    ('echo $HOME "$USER" ${X}', ("echo",)),
    ("echo '$(not run)' \"\\$(not run either)\" '`nor this`'", ("echo",)),
    ("cat <<EOF\nplain text with $HOME\nEOF\n", ("cat",)),
    ("for f in a b; do echo $f; done", ("echo",)),
    ("if grep -q x a.txt; then echo yes; fi", ("grep", "echo")),
    ("date +%Y-%m-%d", ("date",)),
    ("echo ok # don't worry, $(this) is a comment", ("echo",)),
    ("echo a#b", ("echo",)),
]


@pytest.mark.parametrize(("command", "names"), ALLOWED)
def test_allowed_commands_pass_and_report_what_they_run(
    command: str, names: tuple[str, ...]
) -> None:
    # given the default allowlist, when a composed command is validated
    check = validate_bash(command, DEFAULT_BASH_ALLOWLIST)
    # then every command name is reported in order
    assert check.commands == names


REFUSED = [
    # (command, rule, offending word)
    ("ls -la", "not-allowlisted", "ls"),
    ("cat a | sed s/a/b/", "not-allowlisted", "sed"),
    ("echo ok && rm -rf x", "not-allowlisted", "rm"),
    ("echo ok; (cd /; ls)", "shell-state", "cd"),
    ("{ echo ok; cp a b; }", "not-allowlisted", "cp"),
    ("echo $(id)", "command-substitution", "$(id)"),
    ("echo `id`", "command-substitution", "`id`"),
    ('"$(echo cat)" /etc/passwd', "command-substitution", "$(echo cat)"),
    ("cat <<EOF\n$(id)\nEOF\n", "command-substitution", "$("),
    ("cat <<EOF\n`id`\nEOF\n", "command-substitution", "`"),
    ("cat <(echo x)", "process-substitution", "<(echo x)"),
    ("eval echo hi", "executes-argument", "eval"),
    ("exec cat", "executes-argument", "exec"),
    ("source ./x.sh", "executes-argument", "source"),
    (". ./x.sh", "executes-argument", "."),
    ("builtin echo x", "executes-argument", "builtin"),
    ("command -p python3", "executes-argument", "command"),
    ("env python3 -c 1", "executes-argument", "env"),
    ("echo a | xargs cat", "executes-argument", "xargs"),
    ("timeout 5 cat", "executes-argument", "timeout"),
    ("cat a.txt &", "background", "&"),
    ("nohup cat", "executes-argument", "nohup"),
    ("ld-linux-x86-64.so.2 /usr/bin/python3", "executes-argument", "ld-linux-x86-64.so.2"),
    ("python3 -c 'print(1)'", "interpreter", "python3"),
    ("bash -c 'cat /etc/shadow'", "interpreter", "bash"),
    ("sh x.sh", "interpreter", "sh"),
    ("awk 'BEGIN{system(\"id\")}'", "interpreter", "awk"),
    ("/bin/cat a.txt", "bare-name", "/bin/cat"),
    ("./cat a.txt", "bare-name", "./cat"),
    ("/proc/self/root/usr/bin/python3 -c 1", "bare-name", "/proc/self/root/usr/bin/python3"),
    ("/lib64/ld-linux-x86-64.so.2 /usr/bin/python3", "bare-name", "/lib64/ld-linux-x86-64.so.2"),
    ("'c'at a.txt", "literal-name", "'c'at"),
    ('"cat" a.txt', "literal-name", '"cat"'),
    ("\\cat a.txt", "literal-name", "\\cat"),
    ("${X} a.txt", "literal-name", "${X}"),
    ("$X a.txt", "literal-name", "$X"),
    ("ca? a.txt", "literal-name", "ca?"),
    ("PATH=. cat a.txt", "assignment", "PATH=."),
    ("LD_PRELOAD=/workspace/x.so cat", "assignment", "LD_PRELOAD=/workspace/x.so"),
    ("X=1", "assignment", "X=1"),
    ("hash -p /usr/bin/python3 cat", "shell-state", "hash"),
    ("enable -f /workspace/x.so cat", "shell-state", "enable"),
    ("export PATH=/tmp", "shell-state", "export"),
    ("f() { cat; }; f", "function", "f"),
    ("echo hi > /etc/x", "redirection", "/etc/x"),
    ("echo hi > ../outside", "redirection", "../outside"),
    ("echo hi > /workspace/../etc/x", "redirection", "/workspace/../etc/x"),
    ("cat < /proc/self/environ", "redirection", "/proc/self/environ"),
    ("echo x > /dev/tcp/127.0.0.1/5432", "redirection", "/dev/tcp/127.0.0.1/5432"),
    ("echo x > $OUT", "redirection", "$OUT"),
    ("echo x > ~/f", "redirection", "~/f"),
    ("echo ${X@P}", "parameter-expansion", "${X@P}"),
    ("echo ${X:-$HOME}", "parameter-expansion", "${X:-$HOME}"),
    ("echo a # it's\necho ${X@P}", "parameter-expansion", "${X@P}"),
    ("echo a # it's\necho $(id)", "command-substitution", "$(id)"),
    ("echo a#$(id)", "command-substitution", "$(id)"),
    ("echo $((1 + 2))", "parse", ""),
    ("case x in x) echo;; esac", "parse", ""),
    ("[[ -f a ]] && echo", "parse", ""),
    ("echo 'unterminated", "parse", ""),
    ("", "parse", ""),
]


@pytest.mark.parametrize(("command", "rule", "word"), REFUSED)
def test_refused_commands_name_the_rule_and_the_word(command: str, rule: str, word: str) -> None:
    # given the default allowlist, when a command breaking a rule is validated
    with pytest.raises(BashRefused) as caught:
        validate_bash(command, DEFAULT_BASH_ALLOWLIST)
    # then the refusal names the rule and the offending word, and the message quotes the word
    assert caught.value.rule == rule
    assert caught.value.word == word
    assert word in caught.value.message


def test_a_skill_allowlist_replaces_the_default() -> None:
    # given a skill that allows only ls and sort
    allowlist = ("ls", "sort")
    # when commands are validated against it
    check = validate_bash("ls -1 | sort", allowlist)
    with pytest.raises(BashRefused) as caught:
        validate_bash("ls | cat", allowlist)
    # then its own names pass and the default ones no longer do
    assert check.commands == ("ls", "sort")
    assert caught.value.rule == "not-allowlisted"
    assert caught.value.message == "`cat` is not in this call's allowlist (ls, sort)"


def test_an_explicitly_allowlisted_interpreter_passes_but_exec_wrappers_never_do() -> None:
    # given a skill that explicitly allows python3 and (wrongly) env and xargs
    allowlist = ("python3", "env", "xargs", "find")
    # when validated
    check = validate_bash("python3 -c 'print(1)'", allowlist)
    refusals = []
    for command in ("env python3", "xargs python3", "find . -exec cat {} +"):
        with pytest.raises(BashRefused) as caught:
            validate_bash(command, allowlist)
        refusals.append(caught.value.rule)
    # then the interpreter runs (the sandbox contains it) while wrappers stay refused
    assert check.commands == ("python3",)
    assert refusals == ["executes-argument", "executes-argument", "dangerous-option"]


def test_network_commands_are_flagged() -> None:
    # given a pipeline that uses curl and one that does not
    # when validated
    web = validate_bash("curl -s https://x.test | jq .", DEFAULT_BASH_ALLOWLIST)
    local = validate_bash("cat a | jq .", DEFAULT_BASH_ALLOWLIST)
    # then only the first is network-capable
    assert (web.uses_network, local.uses_network) == (True, False)


def test_allowlist_entries_must_be_plain_names() -> None:
    # given an allowlist with a path in it, when normalised, then it is refused by name
    with pytest.raises(ValueError, match="'/usr/bin/python3' is not a plain command name"):
        allowlist_from(["cat", "/usr/bin/python3"])
    assert allowlist_from(["cat", "jq", "cat"]) == ("cat", "jq")
