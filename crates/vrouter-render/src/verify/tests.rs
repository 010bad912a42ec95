use super::*;

const PREFIX: &str = "VRS0123456789abcdef01234567X";

/// Replaces each `§` with the next sentinel.
fn with_sentinels(text: &str) -> (String, usize) {
    let mut out = String::new();
    let mut count = 0;
    for (i, part) in text.split('§').enumerate() {
        if i > 0 {
            out.push_str(&sentinel(PREFIX, count));
            count += 1;
        }
        out.push_str(part);
    }
    (out, count)
}

fn commands(text: &str) -> Result<(), Placement> {
    let (text, count) = with_sentinels(text);
    check_commands(&text, PREFIX, count).map(drop).map_err(|r| r.placement)
}

fn config(text: &str) -> Result<(), Placement> {
    let (text, count) = with_sentinels(text);
    check_config(&text, PREFIX, count).map(drop).map_err(|r| r.placement)
}

#[test]
fn accepted_command_arguments() {
    let accepted = [
        "set system host-name §",
        "set system host-name §\nset system name-server §\n",
        "delete interfaces ethernet § address §",
        "echo §",
        "set a §;set b §&\nset c § | set d §",
        "set a § && set b § || set c §",
        "if true; then set a §; elif false; then set b §; else set c §; fi",
        "while false; do set a §; done\nuntil true; do set b §; done",
        "for x in a b; do set a §; done",
        "case $x in (a|b) set a § ;; c) set b §;& *) ;; esac",
        "{ set a §; }\n( set b § )",
        "FOO=bar set a § >/dev/null 2>&1",
        "set a § # a comment",
        "set a 'quoted' \"dq $HOME\" $(date) `id` ${x:-y} $((1+2)) §",
        "cat <<'EOF'\nset a 'x\nEOF\nset a §",
        "cat <<-EOF\n\t$(x) '\n\tEOF\nset a §",
        "set a \\\n    §",
        "! set a §",
        "set a { § }",
    ];
    for text in accepted {
        assert_eq!(commands(text), Ok(()), "{text:?}");
    }
}

#[test]
fn refused_command_places() {
    use Placement::*;
    let refused: &[(&str, Placement)] = &[
        ("echo `echo §`", Substitution),
        ("echo $§", Expansion),
        ("echo ${§}", Expansion),
        ("echo \\§", Escaped),
        ("set a '§'", Quoted),
        ("set a \"§\"", Quoted),
        ("set a $'§'", Quoted),
        ("set a $(echo §)", Substitution),
        ("set a <(echo §)", Substitution),
        ("set a $((§))", Expansion),
        ("cat <<EOF\n§\nEOF", HereDocument),
        ("cat <<<§", HereString),
        ("echo >§", Redirection),
        ("set a §>/dev/null", Redirection),
        ("set a §<x", Redirection),
        ("x=§ set a b", Assignment),
        ("set a b # §", Comment),
        ("§ a b", CommandName),
        ("set a x§", PartOfWord),
        ("set a {§,b}", PartOfWord),
        ("set a ~§", PartOfWord),
        ("set a §=x", PartOfWord),
        ("case § in a) ;; esac", CasePattern),
        ("case x in §) ;; esac", CasePattern),
        ("for x in §; do :; done", LoopWord),
        ("eval set a §", ArgumentOf("eval".into())),
        ("bash -c §", ArgumentOf("bash".into())),
        ("source §", ArgumentOf("source".into())),
        (". §", ArgumentOf(".".into())),
        ("comment system §", ArgumentOf("comment".into())),
        ("set §", FirstArgumentOfSet),
    ];
    for (text, expected) in refused {
        assert_eq!(commands(text).as_ref(), Err(expected), "{text:?}");
    }
    let not_analysed = [
        "[[ -n x ]]\nset a §",
        "((x=1))\nset a §",
        "function f { :; }\nset a §",
        "f() { :; }\nset a §",
        "set a @(x|y) §",
        "!(set a §)",
        "a=(1 2)\nset a §",
        "echo $[1]\nset a §",
        "echo \"${x:-'a'}\"\nset a §",
        "time set a §",
    ];
    for text in not_analysed {
        assert!(
            matches!(commands(text), Err(NotAnalysed { .. })),
            "{text:?}: {:?}",
            commands(text)
        );
    }
    let syntax = [
        "set a 'x\nset b §",
        "if true; then set a §",
        "set a § )",
        "cat <<EOF\nset a §",
        "cat <<§\nx\n§",
    ];
    for text in syntax {
        assert!(
            matches!(commands(text), Err(Syntax { .. } | HereDocument)),
            "{text:?}: {:?}",
            commands(text)
        );
    }
}

#[test]
fn a_backquoted_command_bash_cannot_parse_is_refused() {
    for text in [
        "set a §\n`\n|; `",
        "set a § `set b ;;`",
        "set a § \"`(`\"",
        "echo `echo \\`|\\``; set a §",
    ] {
        match commands(text) {
            Err(Placement::Syntax { message, .. }) => {
                assert!(message.contains("backquoted command"), "{text:?}: {message}")
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
    let valid = [
        "set a § `date`",
        "set a § `echo \\`date\\``",
        "set a § \"`printf '%s' \\$HOME`\"",
        "``; set a §",
        "set a § `[[ -n x ]]`",
        "set a § \"`echo \\\"it's\\\"`\"",
        "set a § \"`printf \\\"(%s)\\\" x`\"",
    ];
    for text in valid {
        assert_eq!(commands(text), Ok(()), "{text:?}");
    }
}

#[test]
fn a_reserved_word_named_as_a_command_is_not_read() {
    for text in [
        "set a §\n<<EOF }\nEOF\n",
        "set a §; >x if",
        "X=1 { set a §; }",
        "set a §; <x [[",
    ] {
        assert!(
            matches!(commands(text), Err(Placement::NotAnalysed { .. })),
            "{text:?}: {:?}",
            commands(text)
        );
    }
}

#[test]
fn the_issue_cases_are_refused() {
    // backquotes, after `$`, after a backslash, and one branch's quote.
    assert_eq!(commands("echo `echo §`"), Err(Placement::Substitution));
    assert_eq!(commands("echo $§"), Err(Placement::Expansion));
    assert_eq!(commands("echo \\§"), Err(Placement::Escaped));
    assert!(matches!(commands("'§"), Err(Placement::Syntax { line: Some(1), .. })));
}

#[test]
fn config_values_and_tags_are_accepted_nothing_else() {
    assert_eq!(config("system {\n    host-name §\n}\n"), Ok(()));
    assert_eq!(
        config("interfaces {\n    ethernet § {\n        address §\n    }\n}\n"),
        Ok(())
    );
    assert_eq!(config("a §"), Ok(()));
    assert_eq!(config("system {\n    § x\n}\n"), Err(Placement::NodeName));
    assert_eq!(config("system {\n    host-§ x\n}\n"), Err(Placement::PartOfWord));
    assert_eq!(config("a \"§\"\n"), Err(Placement::Quoted));
    assert_eq!(config("/* § */\na b\n"), Err(Placement::ConfigComment));
    assert_eq!(config("// §\na b\n"), Err(Placement::ConfigComment));
    assert_eq!(config("a x§\n"), Err(Placement::PartOfWord));
    // cparse reads `}` into an unquoted value; vyos1x does not.
    assert!(config("a {\n b §}\n").is_err());
    assert!(matches!(config("a {\n b §\n"), Err(Placement::Syntax { .. })));
}

#[test]
fn sentinels_must_each_appear_once() {
    let text = format!("set a {0} {0}", sentinel(PREFIX, 0));
    assert!(check_commands(&text, PREFIX, 1).is_err());
    assert!(check_commands("set a b", PREFIX, 1).is_err());
    assert_eq!(check_commands("set a b", PREFIX, 0), Ok(vec![]));
}
