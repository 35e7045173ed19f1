//! Tokens of the text form, with their line and column.

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `%name` or `%3`
    Value(String),
    /// `@name`
    Func(String),
    /// A bare word: keywords, op names, dtypes, attribute names, `true`, `nan`, `inf`, `null`.
    Ident(String),
    /// A number as written, sign included, parsed later for the dtype it needs.
    Number(String),
    Str(String),
    Punct(char),
    Arrow,
    Eof,
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
    pub col: usize,
}

/// Splits `src` into tokens; an error carries (line, col, message).
pub fn lex(src: &str) -> Result<Vec<Token>, (usize, usize, String)> {
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let mut out = Vec::new();
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '.';
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        let mut advance = |n: usize, i: &mut usize| {
            for _ in 0..n {
                if chars[*i] == '\n' {
                    line += 1;
                    col = 1;
                } else {
                    col += 1;
                }
                *i += 1;
            }
        };
        if c.is_whitespace() {
            advance(1, &mut i);
            continue;
        }
        if c == ';' {
            while i < chars.len() && chars[i] != '\n' {
                advance(1, &mut i);
            }
            continue;
        }
        let start = i;
        let tok = if c == '%' || c == '@' {
            advance(1, &mut i);
            let s = i;
            while i < chars.len() && word(chars[i]) {
                advance(1, &mut i);
            }
            if s == i {
                return Err((tl, tc, format!("expected a name after `{c}`")));
            }
            let name: String = chars[s..i].iter().collect();
            if c == '%' {
                Tok::Value(name)
            } else {
                Tok::Func(name)
            }
        } else if c == '-' && chars.get(i + 1) == Some(&'>') {
            advance(2, &mut i);
            Tok::Arrow
        } else if c.is_ascii_digit()
            || ((c == '-' || c == '+')
                && chars
                    .get(i + 1)
                    .is_some_and(|d| d.is_ascii_digit() || *d == '.' || *d == 'i' || *d == 'n'))
        {
            advance(1, &mut i);
            while i < chars.len()
                && (chars[i].is_alphanumeric()
                    || chars[i] == '.'
                    || ((chars[i] == '-' || chars[i] == '+') && matches!(chars[i - 1], 'e' | 'E')))
            {
                advance(1, &mut i);
            }
            Tok::Number(chars[start..i].iter().collect())
        } else if word(c) {
            while i < chars.len() && word(chars[i]) {
                advance(1, &mut i);
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if c == '"' {
            advance(1, &mut i);
            let s = i;
            while i < chars.len() && chars[i] != '"' && chars[i] != '\n' {
                advance(1, &mut i);
            }
            if i >= chars.len() || chars[i] != '"' {
                return Err((tl, tc, "unterminated string".into()));
            }
            let text: String = chars[s..i].iter().collect();
            advance(1, &mut i);
            Tok::Str(text)
        } else if "(){}[],:=?".contains(c) {
            advance(1, &mut i);
            Tok::Punct(c)
        } else {
            return Err((tl, tc, format!("unexpected character `{c}`")));
        };
        out.push(Token {
            tok,
            line: tl,
            col: tc,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}
