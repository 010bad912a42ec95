//! Where each value landed in rendered commands, read with bash's grammar.
//!
//! A recursive-descent reader of the part of bash that configure-mode command
//! templates use: simple commands, pipelines, `&&`/`||` lists, `{ }`, `( )`,
//! `if`, `while`, `until`, `for … in`, `case`, quoting, `$…` expansions,
//! command and process substitutions, redirections, here-documents and comments.
//! It follows bash 5.2's `parse.y` (`read_token`, `read_token_word`,
//! `parse_matched_pair`, `parse_comsub`, here-document gathering on the next
//! unquoted newline). Anything outside that part that could change where a later
//! word begins or ends (`[[ ]]`, `(( ))`, `function`, `select`, `coproc`,
//! `time`, arrays, extended globs, `$[ ]`, a `${ }` or `$(( ))` holding quotes or
//! substitutions, a line continuation inside a word) stops the reading, so a
//! value after it is refused rather than guessed about: the reader fails closed.
//!
//! What it reports is the set of *accepted* words: whole words, exactly equal to
//! one sentinel, in argument position of a simple command whose name is a plain
//! word on [`ALLOWED_COMMANDS`]. Every other place a sentinel can be is recorded
//! with the reason, for the error message.

use std::ops::Range;

use super::{Placement as ShellPlace, Sentinels};

/// Commands whose arguments may be interpolated values, and why each is safe.
///
/// In the apply script these run after vyatta's `script-template`, which turns on
/// `expand_aliases` and makes `set` and `delete` aliases of `vyatta_cfg_run set` /
/// `vyatta_cfg_run delete` (vyatta-cfg `functions/interpreter/vyatta-cfg-run`,
/// `_vyatta_cfg_init`). That function passes its arguments on as an argument
/// vector (`vyatta_cfg_cmd`, then `/opt/vyatta/sbin/my_set "${@:2}"`), never
/// through `eval` — except that `set` with a first argument starting with `-` or
/// `+` runs bash's builtin `set`, so a value is never accepted as `set`'s first
/// argument. `echo` is bash's builtin, which only prints. Every other vyatta
/// command re-reads arguments as shell code somewhere (`comment`, `copy` and
/// `rename` through `eval`, `save` and `commit-confirm` through `eval "sudo sg …"`,
/// `edit`/`up` through `eval` of cli-shell-api output, `run` by running its first
/// argument as a program), and so do `eval`, `source`, `.`, `exec`, `bash -c`,
/// `sh -c`, `let`, `trap`, `declare`, `printf -v`, `test -v`, …: none is listed.
pub(crate) const ALLOWED_COMMANDS: &[&str] = &["set", "delete", "echo"];

/// Why reading stopped: where, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stop {
    pub at: usize,
    pub place: ShellPlace,
}

type Step<T = ()> = Result<T, Stop>;

/// The outcome of reading rendered commands.
pub(crate) struct Reading {
    /// Accepted sentinel words.
    pub accepted: Vec<Range<usize>>,
    /// Other places a sentinel can be, with their reason.
    pub marks: Vec<(Range<usize>, ShellPlace)>,
    /// Where reading stopped, if it did.
    pub stop: Option<Stop>,
}

/// Reads `text` and reports where the sentinels are.
pub(crate) fn read(text: &str, sentinels: &Sentinels) -> Reading {
    let mut reader = Reader {
        s: text.as_bytes(),
        pos: 0,
        heredocs: Vec::new(),
        marks: Vec::new(),
        accepted: Vec::new(),
        sentinels,
        substitutions: 0,
    };
    let stop = reader.program().err();
    Reading {
        accepted: reader.accepted,
        marks: reader.marks,
        stop,
    }
}

struct Heredoc {
    delimiter: Vec<u8>,
    strip_tabs: bool,
    quoted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Word,
    Newline,
    Op(&'static str),
    Eof,
}

/// Operators, longest first where one is a prefix of another. `<(` and `>(`
/// start words (process substitution) and are checked before these.
const OPERATORS: &[&str] = &[
    ";;&", ";;", ";&", ";", "&&", "&>>", "&>", "&", "||", "|&", "|", "<<<", "<<-", "<<", "<&", "<>", "<", ">>", ">&",
    ">|", ">", "(", ")",
];

const REDIRECTIONS: &[&str] = &["<<<", "<<-", "<<", "<&", "<>", "<", ">>", ">&", ">|", ">", "&>>", "&>"];

/// Reserved words bash has that this reader does not follow.
const NOT_ANALYSED: &[(&str, &str)] = &[
    ("[[", "a `[[ ]]` test"),
    ("]]", "a `[[ ]]` test"),
    ("function", "a function definition"),
    ("select", "a `select` loop"),
    ("coproc", "a `coproc` command"),
    ("time", "a `time` pipeline"),
];

const RESERVED: &[&str] = &[
    "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "in", "case", "esac", "{", "}", "!",
];

struct Reader<'a> {
    s: &'a [u8],
    pos: usize,
    heredocs: Vec<Heredoc>,
    marks: Vec<(Range<usize>, ShellPlace)>,
    accepted: Vec<Range<usize>>,
    sentinels: &'a Sentinels,
    /// How many substitutions the reader is inside: a word there is output of
    /// another command, never accepted.
    substitutions: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn at(&self, text: &str) -> bool {
        self.s[self.pos..].starts_with(text.as_bytes())
    }

    fn stop<T>(&self, at: usize, place: ShellPlace) -> Step<T> {
        Err(Stop { at, place })
    }

    fn syntax<T>(&self, at: usize, what: &str) -> Step<T> {
        self.stop(
            at,
            ShellPlace::Syntax {
                message: what.to_owned(),
                line: None,
            },
        )
    }

    fn not_analysed<T>(&self, at: usize, what: &'static str) -> Step<T> {
        self.stop(
            at,
            ShellPlace::NotAnalysed {
                construct: what,
                line: 0,
            },
        )
    }

    fn mark(&mut self, range: Range<usize>, place: ShellPlace) {
        if self.sentinels.any_within(range.clone()) {
            self.marks.push((range, place));
        }
    }

    /// Skips blanks, line continuations and a comment, up to the next token.
    fn skip_blanks(&mut self) -> Step {
        loop {
            match self.peek() {
                Some(b' ' | b'\t') => self.pos += 1,
                Some(b'\\') if self.s.get(self.pos + 1) == Some(&b'\n') => self.pos += 2,
                Some(b'#') => {
                    let start = self.pos;
                    let end = self.s[start..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(self.s.len(), |n| start + n);
                    if end > start && self.s[end - 1] == b'\\' {
                        return self.not_analysed(start, "a comment ending in a backslash");
                    }
                    self.mark(start..end, ShellPlace::Comment);
                    self.pos = end;
                }
                _ => return Ok(()),
            }
        }
    }

    fn token(&mut self) -> Step<Tok> {
        self.skip_blanks()?;
        let Some(c) = self.peek() else {
            return Ok(Tok::Eof);
        };
        if c == b'\n' {
            return Ok(Tok::Newline);
        }
        if !matches!(c, b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')') || self.at("<(") || self.at(">(") {
            return Ok(Tok::Word);
        }
        Ok(OPERATORS
            .iter()
            .find(|op| self.at(op))
            .map_or(Tok::Word, |op| Tok::Op(op)))
    }

    /// The next token if it is a word at command position equal to `word`.
    fn at_word(&mut self, word: &str) -> Step<bool> {
        Ok(self.token()? == Tok::Word && self.word_text_here() == Some(word.as_bytes()))
    }

    /// The raw text of the plain word starting here (letters, digits and the
    /// characters reserved words and `[[` use), without consuming it.
    fn word_text_here(&self) -> Option<&[u8]> {
        let rest = &self.s[self.pos..];
        let n = rest
            .iter()
            .take_while(|b| !matches!(b, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')'))
            .count();
        Some(&rest[..n])
    }

    fn expect_word(&mut self, word: &str) -> Step {
        if self.at_word(word)? {
            self.pos += word.len();
            Ok(())
        } else {
            self.syntax(self.pos, &format!("expected `{word}`"))
        }
    }

    fn expect_op(&mut self, op: &str) -> Step {
        if self.token()? == Tok::Op(op_static(op)) {
            self.pos += op.len();
            Ok(())
        } else {
            self.syntax(self.pos, &format!("expected `{op}`"))
        }
    }

    /// Consumes an unquoted newline, then the bodies of the here-documents its
    /// line opened, as bash gathers them.
    fn newline(&mut self) -> Step {
        self.pos += 1;
        for doc in std::mem::take(&mut self.heredocs) {
            let body_start = self.pos;
            loop {
                if self.pos >= self.s.len() {
                    return self.syntax(body_start, "a here-document without its end line");
                }
                let line_end = self.s[self.pos..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(self.s.len(), |n| self.pos + n);
                let mut line = &self.s[self.pos..line_end];
                if doc.strip_tabs {
                    while let [b'\t', rest @ ..] = line {
                        line = rest;
                    }
                }
                if line == doc.delimiter.as_slice() {
                    self.mark(body_start..self.pos, ShellPlace::HereDocument);
                    self.pos = (line_end + 1).min(self.s.len());
                    break;
                }
                if !doc.quoted && line.ends_with(b"\\") {
                    return self.not_analysed(self.pos, "a here-document line ending in a backslash");
                }
                self.pos = (line_end + 1).min(self.s.len());
            }
        }
        Ok(())
    }

    fn skip_newlines(&mut self) -> Step {
        while self.token()? == Tok::Newline {
            self.newline()?;
        }
        Ok(())
    }

    fn program(&mut self) -> Step {
        self.list(&[])?;
        match self.token()? {
            Tok::Eof if self.heredocs.is_empty() => Ok(()),
            Tok::Eof => self.syntax(self.pos, "a here-document without its body"),
            _ => {
                let at = self.pos;
                let what = format!("unexpected `{}`", String::from_utf8_lossy(self.word_text_or_op()));
                self.syntax(at, &what)
            }
        }
    }

    fn word_text_or_op(&mut self) -> &[u8] {
        match self.token() {
            Ok(Tok::Op(op)) => op.as_bytes(),
            _ => self.word_text_here().unwrap_or_default(),
        }
    }

    /// Commands separated by `;`, `&` or newlines, up to EOF, `)`, a `case`
    /// terminator or one of `terminators` at command position.
    fn list(&mut self, terminators: &[&str]) -> Step {
        let mut commands = 0;
        loop {
            self.skip_newlines()?;
            match self.token()? {
                Tok::Eof | Tok::Op(")" | ";;" | ";&" | ";;&") => break,
                Tok::Word if terminators.iter().any(|t| self.word_text_here() == Some(t.as_bytes())) => break,
                _ => {}
            }
            self.and_or()?;
            commands += 1;
            match self.token()? {
                Tok::Op(";" | "&") => self.pos += 1,
                Tok::Newline => self.newline()?,
                Tok::Eof | Tok::Op(")" | ";;" | ";&" | ";;&") => break,
                Tok::Word if terminators.iter().any(|t| self.word_text_here() == Some(t.as_bytes())) => break,
                _ => {
                    let what = format!("unexpected `{}`", String::from_utf8_lossy(self.word_text_or_op()));
                    return self.syntax(self.pos, &what);
                }
            }
        }
        if commands == 0 && !terminators.is_empty() {
            return self.syntax(self.pos, "an empty command list");
        }
        Ok(())
    }

    fn and_or(&mut self) -> Step {
        self.pipeline()?;
        while let Tok::Op(op @ ("&&" | "||")) = self.token()? {
            self.pos += op.len();
            self.skip_newlines()?;
            self.pipeline()?;
        }
        Ok(())
    }

    fn pipeline(&mut self) -> Step {
        // `!(…)` is a negation and a subshell without extglob, one pattern word
        // with it: which one depends on a shell option, so it is not read.
        if self.token()? == Tok::Word && self.at("!(") {
            return self.not_analysed(self.pos, "an extended glob pattern");
        }
        if self.at_word("!")? {
            self.pos += 1;
        }
        self.command()?;
        while let Tok::Op(op @ ("|" | "|&")) = self.token()? {
            self.pos += op.len();
            self.skip_newlines()?;
            self.command()?;
        }
        Ok(())
    }

    fn command(&mut self) -> Step {
        let start = self.pos;
        match self.token()? {
            Tok::Op("(") => {
                if self.at("((") {
                    return self.not_analysed(start, "an arithmetic command `(( ))`");
                }
                self.pos += 1;
                self.list(&[])?;
                self.expect_op(")")?;
                return self.redirections();
            }
            Tok::Op(op) if REDIRECTIONS.contains(&op) => return self.simple_command(),
            Tok::Op(op) => return self.syntax(start, &format!("unexpected `{op}`")),
            Tok::Eof | Tok::Newline => return self.syntax(start, "a missing command"),
            Tok::Word => {}
        }
        let word_len = self.word_text_here().map_or(0, <[u8]>::len);
        let s = self.s;
        let word = &s[self.pos..self.pos + word_len];
        if let Some((_, what)) = NOT_ANALYSED.iter().find(|(w, _)| w.as_bytes() == word) {
            return self.not_analysed(start, what);
        }
        match word {
            b"{" => {
                self.pos += 1;
                self.list(&["}"])?;
                self.expect_word("}")?;
            }
            b"if" => {
                self.pos += 2;
                self.list(&["then"])?;
                self.expect_word("then")?;
                self.list(&["elif", "else", "fi"])?;
                loop {
                    if self.at_word("elif")? {
                        self.pos += 4;
                        self.list(&["then"])?;
                        self.expect_word("then")?;
                        self.list(&["elif", "else", "fi"])?;
                    } else if self.at_word("else")? {
                        self.pos += 4;
                        self.list(&["fi"])?;
                    } else {
                        break;
                    }
                }
                self.expect_word("fi")?;
            }
            b"while" | b"until" => {
                self.pos += word.len();
                self.list(&["do"])?;
                self.do_group()?;
            }
            b"for" => self.for_loop()?,
            b"case" => self.case()?,
            w if RESERVED.contains(&std::str::from_utf8(w).unwrap_or("")) => {
                return self.syntax(start, &format!("unexpected `{}`", String::from_utf8_lossy(w)));
            }
            _ => return self.simple_command(),
        }
        self.redirections()
    }

    fn do_group(&mut self) -> Step {
        self.expect_word("do")?;
        self.list(&["done"])?;
        self.expect_word("done")
    }

    fn for_loop(&mut self) -> Step {
        self.pos += 3;
        if self.token()? == Tok::Op("(") {
            return self.not_analysed(self.pos, "an arithmetic `for (( ))` loop");
        }
        if self.token()? != Tok::Word {
            return self.syntax(self.pos, "a `for` without a variable name");
        }
        let name = self.word()?;
        self.mark(name, ShellPlace::LoopWord);
        self.skip_newlines()?;
        if self.at_word("in")? {
            self.pos += 2;
            while self.token()? == Tok::Word {
                let word = self.word()?;
                self.mark(word, ShellPlace::LoopWord);
            }
            match self.token()? {
                Tok::Op(";") => self.pos += 1,
                Tok::Newline => self.newline()?,
                _ => return self.syntax(self.pos, "expected `;` or a newline after the `for` list"),
            }
        } else if self.token()? == Tok::Op(";") {
            self.pos += 1;
        }
        self.skip_newlines()?;
        self.do_group()
    }

    fn case(&mut self) -> Step {
        self.pos += 4;
        if self.token()? != Tok::Word {
            return self.syntax(self.pos, "a `case` without a word");
        }
        let word = self.word()?;
        self.mark(word, ShellPlace::CasePattern);
        self.skip_newlines()?;
        self.expect_word("in")?;
        loop {
            self.skip_newlines()?;
            if self.at_word("esac")? {
                self.pos += 4;
                return Ok(());
            }
            if self.token()? == Tok::Op("(") {
                self.pos += 1;
            }
            loop {
                if self.token()? != Tok::Word {
                    return self.syntax(self.pos, "a `case` item without a pattern");
                }
                let pattern = self.word()?;
                self.mark(pattern, ShellPlace::CasePattern);
                if self.token()? == Tok::Op("|") {
                    self.pos += 1;
                } else {
                    break;
                }
            }
            self.expect_op(")")?;
            self.skip_newlines()?;
            if !self.at_word("esac")? && !matches!(self.token()?, Tok::Op(";;" | ";&" | ";;&")) {
                self.list(&["esac"])?;
            }
            match self.token()? {
                Tok::Op(op @ (";;" | ";&" | ";;&")) => self.pos += op.len(),
                _ if self.at_word("esac")? => {}
                _ => return self.syntax(self.pos, "expected `;;` or `esac`"),
            }
        }
    }

    /// Redirections after a compound command.
    fn redirections(&mut self) -> Step {
        loop {
            match self.token()? {
                Tok::Op(op) if REDIRECTIONS.contains(&op) => self.redirection(op)?,
                Tok::Word if self.io_number_here() => {
                    let word = self.word()?;
                    self.mark(word, ShellPlace::Redirection);
                    let Tok::Op(op) = self.token()? else { unreachable!() };
                    self.redirection(op)?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Whether the word here is an I/O number (`2>`) or `{name}` before a
    /// redirection operator.
    fn io_number_here(&self) -> bool {
        if !self.peek().is_some_and(|b| b.is_ascii_digit() || b == b'{') {
            return false;
        }
        let Some(word) = self.word_text_here() else {
            return false;
        };
        let next = self.s.get(self.pos + word.len());
        if !matches!(next, Some(b'<' | b'>')) || word.is_empty() {
            return false;
        }
        let digits = word.iter().all(u8::is_ascii_digit);
        let braced = word.len() > 2
            && word[0] == b'{'
            && word[word.len() - 1] == b'}'
            && word[1..word.len() - 1]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'_');
        digits || braced
    }

    fn redirection(&mut self, op: &'static str) -> Step {
        let start = self.pos;
        self.pos += op.len();
        if self.token()? != Tok::Word {
            return self.syntax(self.pos, &format!("a `{op}` without a target"));
        }
        let target = self.word()?;
        match op {
            "<<" | "<<-" => {
                self.mark(start..target.end, ShellPlace::HereDocument);
                let (delimiter, quoted) = self.heredoc_delimiter(target.clone())?;
                self.heredocs.push(Heredoc {
                    delimiter,
                    strip_tabs: op == "<<-",
                    quoted,
                });
            }
            "<<<" => self.mark(start..target.end, ShellPlace::HereString),
            _ => self.mark(start..target.end, ShellPlace::Redirection),
        }
        Ok(())
    }

    /// A here-document delimiter word with its quotes removed, as bash compares
    /// lines with it, and whether it was quoted (then the body is literal).
    fn heredoc_delimiter(&self, word: Range<usize>) -> Step<(Vec<u8>, bool)> {
        let raw = &self.s[word.clone()];
        let mut out = Vec::new();
        let mut quoted = false;
        let mut i = 0;
        while i < raw.len() {
            match raw[i] {
                b'\'' | b'"' => {
                    let quote = raw[i];
                    quoted = true;
                    let Some(n) = raw[i + 1..].iter().position(|&b| b == quote) else {
                        return self.not_analysed(word.start, "an unusual here-document delimiter");
                    };
                    let inner = &raw[i + 1..i + 1 + n];
                    if quote == b'"' && inner.iter().any(|b| matches!(b, b'\\' | b'$' | b'`')) {
                        return self.not_analysed(word.start, "an unusual here-document delimiter");
                    }
                    out.extend_from_slice(inner);
                    i += n + 2;
                }
                b'\\' if i + 1 < raw.len() => {
                    quoted = true;
                    out.push(raw[i + 1]);
                    i += 2;
                }
                b'$' | b'`' | b'\\' => return self.not_analysed(word.start, "an unusual here-document delimiter"),
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        Ok((out, quoted))
    }

    fn simple_command(&mut self) -> Step {
        let mut name: Option<Range<usize>> = None;
        let mut arguments: Vec<Range<usize>> = Vec::new();
        loop {
            match self.token()? {
                Tok::Op(op) if REDIRECTIONS.contains(&op) => self.redirection(op)?,
                Tok::Word if self.io_number_here() => {
                    let word = self.word()?;
                    self.mark(word, ShellPlace::Redirection);
                    let Tok::Op(op) = self.token()? else { unreachable!() };
                    self.redirection(op)?;
                }
                Tok::Word => {
                    let word = self.word()?;
                    let before_redirection = matches!(self.peek(), Some(b'<' | b'>'));
                    if name.is_some() && before_redirection {
                        // Marked by `word`: never an accepted argument.
                    } else if name.is_some() {
                        arguments.push(word);
                    } else if is_assignment(&self.s[word.clone()]) {
                        self.mark(word, ShellPlace::Assignment);
                    } else {
                        if self.token()? == Tok::Op("(") {
                            return self.not_analysed(word.start, "a function definition");
                        }
                        // Only after a redirection or an assignment: bash
                        // runs `<x }` as a command named `}`, where other
                        // shells see a misplaced `}`.
                        if is_reserved(&self.s[word.clone()]) {
                            return self.not_analysed(word.start, "a reserved word as a command's name");
                        }
                        name = Some(word);
                    }
                }
                _ => break,
            }
        }
        let Some(name) = name else {
            return Ok(());
        };
        self.mark(name.clone(), ShellPlace::CommandName);
        let s = self.s;
        let command = &s[name];
        let allowed = ALLOWED_COMMANDS.iter().any(|c| c.as_bytes() == command);
        for (index, argument) in arguments.into_iter().enumerate() {
            if !self.sentinels.is_exactly_one(argument.clone()) {
                continue;
            }
            if self.substitutions > 0 {
                self.mark(argument, ShellPlace::Substitution);
            } else if !allowed {
                let command = String::from_utf8_lossy(command).into_owned();
                self.mark(argument, ShellPlace::ArgumentOf(command));
            } else if command == b"set" && index == 0 {
                self.mark(argument, ShellPlace::FirstArgumentOfSet);
            } else {
                self.accepted.push(argument);
            }
        }
        Ok(())
    }

    /// Reads one word: quoting, expansions and substitutions included.
    fn word(&mut self) -> Step<Range<usize>> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b')' => break,
                b'<' | b'>' if self.pos == start && self.s.get(self.pos + 1) == Some(&b'(') => {
                    self.pos += 2;
                    self.nested_list(self.pos - 2, ShellPlace::Substitution)?;
                }
                b'<' | b'>' => break,
                b'(' => {
                    let previous = (self.pos > start).then(|| self.s[self.pos - 1]);
                    match previous {
                        Some(b'@' | b'!' | b'+' | b'*' | b'?') => {
                            return self.not_analysed(self.pos - 1, "an extended glob pattern");
                        }
                        Some(b'=') => return self.not_analysed(start, "an array assignment"),
                        _ => break,
                    }
                }
                b'\\' => match self.s.get(self.pos + 1) {
                    Some(b'\n') => return self.not_analysed(self.pos, "a line continuation inside a word"),
                    Some(_) => {
                        let len = 1 + char_len(&self.s[self.pos + 1..]);
                        self.mark(self.pos..self.pos + len, ShellPlace::Escaped);
                        self.pos += len;
                    }
                    None => return self.syntax(self.pos, "a backslash at the end of the commands"),
                },
                b'\'' => self.single_quoted(ShellPlace::Quoted)?,
                b'"' => self.double_quoted()?,
                b'`' => self.backquoted(false)?,
                b'$' => self.dollar(false)?,
                _ => self.pos += 1,
            }
        }
        let word = start..self.pos;
        if word.is_empty() {
            return self.syntax(start, "an empty word");
        }
        // A value right before `<` or `>` would become an I/O number (`2>`)
        // when it is written as plain digits.
        if matches!(self.peek(), Some(b'<' | b'>')) && self.sentinels.any_within(word.clone()) {
            self.mark(word.clone(), ShellPlace::Redirection);
        }
        if !self.sentinels.is_exactly_one(word.clone()) {
            self.mark(word.clone(), ShellPlace::PartOfWord);
        }
        Ok(word)
    }

    fn single_quoted(&mut self, place: ShellPlace) -> Step {
        let start = self.pos;
        self.pos += 1;
        match self.s[self.pos..].iter().position(|&b| b == b'\'') {
            Some(n) => {
                self.pos += n + 1;
                self.mark(start..self.pos, place);
                Ok(())
            }
            None => self.syntax(start, "a single quote that is never closed"),
        }
    }

    /// `$'…'`: backslash escapes, ends at an unescaped `'`.
    fn ansi_c_quoted(&mut self) -> Step {
        let start = self.pos;
        self.pos += 2;
        self.past_unescaped(start, b'\'', ShellPlace::Quoted, "a `$'` quote that is never closed")
    }

    /// Moves past the first `close` not escaped by a backslash, and marks
    /// the quote opened at `start` as `place`.
    fn past_unescaped(&mut self, start: usize, close: u8, place: ShellPlace, unclosed: &str) -> Step {
        loop {
            match self.peek() {
                None => return self.syntax(start, unclosed),
                Some(b'\\') => self.pos = (self.pos + 2).min(self.s.len()),
                Some(b) if b == close => {
                    self.pos += 1;
                    self.mark(start..self.pos, place);
                    return Ok(());
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    fn double_quoted(&mut self) -> Step {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                None => return self.syntax(start, "a double quote that is never closed"),
                Some(b'\\') => self.pos = (self.pos + 2).min(self.s.len()),
                Some(b'"') => {
                    self.pos += 1;
                    self.mark(start..self.pos, ShellPlace::Quoted);
                    return Ok(());
                }
                Some(b'`') => self.backquoted(true)?,
                Some(b'$') => self.dollar(true)?,
                Some(_) => self.pos += 1,
            }
        }
    }

    /// `` `…` ``: ends at the first unescaped backquote (bash's
    /// `parse_matched_pair`, which does not look at quotes inside). Bash
    /// parses the inside only when it runs it; it is parsed here already, so
    /// that a command bash cannot parse is refused when the template renders,
    /// not met on the router halfway through an apply.
    fn backquoted(&mut self, in_double_quotes: bool) -> Step {
        let start = self.pos;
        self.pos += 1;
        self.past_unescaped(
            start,
            b'`',
            ShellPlace::Substitution,
            "a backquote that is never closed",
        )?;
        let inside = unescape_backquoted(&self.s[start + 1..self.pos - 1], in_double_quotes);
        match syntax_error(&inside) {
            Some(message) => self.syntax(start, &format!("a backquoted command bash cannot parse: {message}")),
            None => Ok(()),
        }
    }

    fn dollar(&mut self, in_double_quotes: bool) -> Step {
        let start = self.pos;
        let next = self.s.get(self.pos + 1).copied();
        match next {
            Some(b'(') if self.s.get(self.pos + 2) == Some(&b'(') => self.arithmetic(),
            Some(b'(') => {
                self.pos += 2;
                self.nested_list(start, ShellPlace::Substitution)
            }
            Some(b'{') => self.braced_parameter(),
            Some(b'[') => self.not_analysed(start, "a `$[ ]` arithmetic expansion"),
            Some(b'\'') if !in_double_quotes => self.ansi_c_quoted(),
            Some(b'"') if !in_double_quotes => {
                self.pos += 1;
                self.double_quoted()
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                self.pos += 1;
                while self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    self.pos += 1;
                }
                self.mark(start..self.pos, ShellPlace::Expansion);
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || b"@*#?-$!".contains(&c) => {
                self.pos += 2;
                self.mark(start..self.pos, ShellPlace::Expansion);
                Ok(())
            }
            _ => {
                self.pos += 1;
                Ok(())
            }
        }
    }

    /// `$( … )`, `<( … )`, `>( … )`: a command list read recursively, as bash
    /// 5.2's `parse_comsub` does. Here-documents may not cross its edges.
    fn nested_list(&mut self, start: usize, place: ShellPlace) -> Step {
        if !self.heredocs.is_empty() {
            return self.not_analysed(start, "a substitution on the line of a here-document operator");
        }
        self.substitutions += 1;
        self.list(&[])?;
        self.substitutions -= 1;
        if !self.heredocs.is_empty() {
            return self.not_analysed(start, "a here-document inside a substitution");
        }
        self.expect_op(")")?;
        self.mark(start..self.pos, place);
        Ok(())
    }

    /// `$(( … ))` holding only operators, numbers and variable names.
    fn arithmetic(&mut self) -> Step {
        let start = self.pos;
        self.pos += 3;
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Some(b'(') => depth += 1,
                Some(b')') if depth > 0 => depth -= 1,
                Some(b')') if self.s.get(self.pos + 1) == Some(&b')') => {
                    self.pos += 2;
                    self.mark(start..self.pos, ShellPlace::Expansion);
                    return Ok(());
                }
                Some(b) if b.is_ascii_alphanumeric() || b" \t_+-*/%<>=!&|^~?:,$#[]".contains(&b) => {}
                _ => {
                    return self.not_analysed(
                        start,
                        "a `$(( ))` expansion holding quotes, substitutions or line breaks",
                    );
                }
            }
            self.pos += 1;
        }
    }

    /// `${ … }` holding no quotes, nested expansions or line breaks.
    fn braced_parameter(&mut self) -> Step {
        let start = self.pos;
        self.pos += 2;
        loop {
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    self.mark(start..self.pos, ShellPlace::Expansion);
                    return Ok(());
                }
                Some(b'\'' | b'"' | b'`' | b'$' | b'\\' | b'{' | b'\n') | None => {
                    return self.not_analysed(
                        start,
                        "a `${ }` expansion holding quotes, nested expansions or line breaks",
                    );
                }
                Some(_) => self.pos += 1,
            }
        }
    }
}

/// The command inside backquotes as bash parses it: a backslash there
/// escapes only `$`, `` ` `` and another backslash (and `"` inside double
/// quotes, whose own reading removed it first), and is dropped before.
fn unescape_backquoted(inside: &[u8], in_double_quotes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(inside.len());
    let mut rest = inside;
    while let Some((&first, tail)) = rest.split_first() {
        match tail.first() {
            Some(&next @ (b'$' | b'`' | b'\\')) if first == b'\\' => {
                out.push(next);
                rest = &tail[1..];
            }
            Some(b'"') if first == b'\\' && in_double_quotes => {
                out.push(b'"');
                rest = &tail[1..];
            }
            _ => {
                out.push(first);
                rest = tail;
            }
        }
    }
    out
}

/// Why bash cannot parse `text` as a command list, if it cannot. Where
/// values are does not matter here: the caller marked the whole text.
fn syntax_error(text: &[u8]) -> Option<String> {
    let none = Sentinels { spans: Vec::new() };
    let mut reader = Reader {
        s: text,
        pos: 0,
        heredocs: Vec::new(),
        marks: Vec::new(),
        accepted: Vec::new(),
        sentinels: &none,
        substitutions: 1,
    };
    match reader.program() {
        Err(Stop {
            place: ShellPlace::Syntax { message, .. },
            ..
        }) => Some(message),
        _ => None,
    }
}

fn is_reserved(word: &[u8]) -> bool {
    RESERVED
        .iter()
        .chain(NOT_ANALYSED.iter().map(|(w, _)| w))
        .any(|w| w.as_bytes() == word)
}

/// `name=`, `name+=`, `name[…]=` at the start of a word before the command name.
fn is_assignment(word: &[u8]) -> bool {
    let name = word
        .iter()
        .enumerate()
        .take_while(|(i, b)| b.is_ascii_alphabetic() || **b == b'_' || (*i > 0 && b.is_ascii_digit()))
        .count();
    if name == 0 {
        return false;
    }
    let mut rest = &word[name..];
    if rest.first() == Some(&b'[') {
        let Some(close) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        rest = &rest[close + 1..];
    }
    rest.starts_with(b"=") || rest.starts_with(b"+=")
}

fn char_len(rest: &[u8]) -> usize {
    match rest.first() {
        Some(b) if *b >= 0xf0 => 4,
        Some(b) if *b >= 0xe0 => 3,
        Some(b) if *b >= 0xc0 => 2,
        Some(_) => 1,
        None => 0,
    }
    .min(rest.len())
}

fn op_static(op: &str) -> &'static str {
    OPERATORS.iter().find(|o| **o == op).copied().unwrap_or(";")
}
