//! Just enough of a `.proto` reader to scaffold: the package, the imports, the top-level message
//! and enum names, and each service's RPCs with their request/response types and streaming
//! kinds. The real compilation is protoc's (zrpc-build); a full parser (e.g. `protox`) would be a
//! large dependency for these few facts.
//!
//! The names the generated Rust uses follow prost-build exactly (`ident.rs`: heck's word
//! splitting, then raw identifiers for keywords), since the scaffold's code must name what
//! prost and tonic generate.

use std::fmt;

/// A service and its RPCs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Service {
    pub(crate) name: String,
    pub(crate) rpcs: Vec<Rpc>,
}

/// One RPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rpc {
    pub(crate) name: String,
    pub(crate) request: String,
    pub(crate) response: String,
    pub(crate) client_streaming: bool,
    pub(crate) server_streaming: bool,
}

impl Rpc {
    /// The kind, as the docs name it.
    pub(crate) fn kind(&self) -> &'static str {
        match (self.client_streaming, self.server_streaming) {
            (false, false) => "unary",
            (true, false) => "client streaming",
            (false, true) => "server streaming",
            (true, true) => "bidirectional streaming",
        }
    }
}

/// A parsed proto file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proto {
    /// `package` (empty when the file has none).
    pub(crate) package: String,
    /// The `import`ed files, as written (`"common/money.proto"`).
    pub(crate) imports: Vec<String>,
    /// Top-level `message` and `enum` names.
    pub(crate) types: Vec<String>,
    pub(crate) services: Vec<Service>,
}

impl Proto {
    /// Whether prost generates any code for this file (a file of imports and options only
    /// has no module of its own).
    pub(crate) fn defines_code(&self) -> bool {
        !self.types.is_empty() || !self.services.is_empty()
    }
}

/// Why a proto could not be read.
#[derive(Debug)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Tokens with their line numbers; comments dropped, strings kept as one token.
fn tokens(src: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                    }
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' | '\'' => {
                let mut s = String::from(c);
                for d in chars.by_ref() {
                    s.push(d);
                    if d == c {
                        break;
                    }
                }
                out.push((line, s));
            }
            c if c.is_alphanumeric() || c == '_' || c == '.' => {
                let mut s = String::from(c);
                while let Some(&d) = chars.peek() {
                    if d.is_alphanumeric() || d == '_' || d == '.' {
                        s.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push((line, s));
            }
            c => out.push((line, c.to_string())),
        }
    }
    out
}

/// Parses the package and services of a proto file.
pub(crate) fn parse(src: &str) -> Result<Proto, ParseError> {
    let toks = tokens(src);
    let mut proto = Proto {
        package: String::new(),
        imports: Vec::new(),
        types: Vec::new(),
        services: Vec::new(),
    };
    let mut i = 0;
    let err = |line: usize, message: String| ParseError { line, message };
    let at = |i: usize| toks.get(i).map(|(_, t)| t.as_str()).unwrap_or("");
    let line_at = |i: usize| toks.get(i).or(toks.last()).map(|(l, _)| *l).unwrap_or(1);
    let mut depth = 0usize;
    while i < toks.len() {
        match at(i) {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "package" if depth == 0 => {
                proto.package = at(i + 1).to_owned();
                i += 1;
            }
            "import" if depth == 0 => {
                if matches!(at(i + 1), "public" | "weak") {
                    i += 1;
                }
                let path = at(i + 1);
                let unquoted = path
                    .strip_prefix(['"', '\''])
                    .and_then(|p| p.strip_suffix(['"', '\'']));
                match unquoted {
                    Some(p) if !p.is_empty() => proto.imports.push(p.to_owned()),
                    _ => {
                        return Err(err(
                            line_at(i),
                            format!(
                                "cannot read this import: expected a quoted file name, found `{path}`"
                            ),
                        ));
                    }
                }
                i += 1;
            }
            "message" | "enum" if depth == 0 => {
                proto.types.push(at(i + 1).to_owned());
                i += 1;
            }
            "service" if depth == 0 => {
                let name = at(i + 1).to_owned();
                if at(i + 2) != "{" {
                    return Err(err(line_at(i), format!("`service {name}` without `{{`")));
                }
                i += 3;
                let mut rpcs = Vec::new();
                let mut inner = 0usize;
                while i < toks.len() {
                    match at(i) {
                        "}" if inner == 0 => break,
                        "{" => inner += 1,
                        "}" => inner -= 1,
                        "rpc" if inner == 0 => {
                            let (rpc, next) = parse_rpc(&toks, i)?;
                            rpcs.push(rpc);
                            i = next;
                            continue;
                        }
                        _ => {}
                    }
                    i += 1;
                }
                if i >= toks.len() {
                    return Err(err(line_at(i), format!("service {name} is not closed")));
                }
                proto.services.push(Service { name, rpcs });
            }
            _ => {}
        }
        i += 1;
    }
    Ok(proto)
}

/// `rpc Name ( [stream] Req ) returns ( [stream] Resp ) ;|{...}` starting at `i`.
fn parse_rpc(toks: &[(usize, String)], mut i: usize) -> Result<(Rpc, usize), ParseError> {
    let line = toks[i].0;
    let at = |i: usize| toks.get(i).map(|(_, t)| t.as_str()).unwrap_or("");
    let bad = |what: &str| ParseError {
        line,
        message: format!("cannot read this rpc: expected {what}"),
    };
    let name = at(i + 1).to_owned();
    i += 2;
    let side = |i: &mut usize| -> Result<(bool, String), ParseError> {
        if at(*i) != "(" {
            return Err(bad("`(`"));
        }
        *i += 1;
        let streaming = at(*i) == "stream" && at(*i + 1) != ")";
        if streaming {
            *i += 1;
        }
        let ty = at(*i).trim_start_matches('.').to_owned();
        if ty.is_empty() || at(*i + 1) != ")" {
            return Err(bad("a message type and `)`"));
        }
        *i += 2;
        Ok((streaming, ty))
    };
    let (client_streaming, request) = side(&mut i)?;
    if at(i) != "returns" {
        return Err(bad("`returns`"));
    }
    i += 1;
    let (server_streaming, response) = side(&mut i)?;
    match at(i) {
        ";" => i += 1,
        "{" => {
            let mut depth = 0;
            while i < toks.len() {
                match at(i) {
                    "{" => depth += 1,
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => return Err(bad("`;` or `{`")),
    }
    Ok((
        Rpc {
            name,
            request,
            response,
            client_streaming,
            server_streaming,
        },
        i,
    ))
}

/// The words of a name, split as heck (prost's case conversion) splits them: at non-alphanumeric
/// characters, before an uppercase letter that follows a lowercase one (`sayHello`), and before
/// the last capital of a run followed by a lowercase letter (`HTTPStatus` -> `HTTP`, `Status`).
fn words(name: &str) -> Vec<&str> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Boundary,
        Lower,
        Upper,
    }
    let mut out = Vec::new();
    for word in name.split(|c: char| !c.is_alphanumeric()) {
        let mut chars = word.char_indices().peekable();
        let mut start = 0;
        let mut mode = Mode::Boundary;
        while let Some((i, c)) = chars.next() {
            let Some(&(next_i, next)) = chars.peek() else {
                out.push(&word[start..]);
                break;
            };
            let next_mode = if c.is_lowercase() {
                Mode::Lower
            } else if c.is_uppercase() {
                Mode::Upper
            } else {
                mode
            };
            if next_mode == Mode::Lower && next.is_uppercase() {
                out.push(&word[start..next_i]);
                start = next_i;
                mode = Mode::Boundary;
            } else if mode == Mode::Upper && c.is_uppercase() && next.is_lowercase() {
                out.push(&word[start..i]);
                start = i;
                mode = Mode::Boundary;
            } else {
                mode = next_mode;
            }
        }
    }
    out.retain(|w| !w.is_empty());
    out
}

/// `SayHello` -> `say_hello`, `GetHTTPStatus` -> `get_http_status` (heck's `to_snake_case`).
pub(crate) fn snake(name: &str) -> String {
    words(name)
        .iter()
        .map(|w| w.to_lowercase())
        .collect::<Vec<_>>()
        .join("_")
}

/// `say_hello` / `sayHello` -> `SayHello` (heck's `to_upper_camel_case`).
pub(crate) fn camel(name: &str) -> String {
    words(name)
        .iter()
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| {
                    f.to_uppercase()
                        .chain(c.flat_map(char::to_lowercase))
                        .collect::<String>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// `name` as prost makes it a Rust identifier: keywords become raw identifiers (`r#match`),
/// except those that cannot be raw (`self`, `Self`, `super`, `crate`, `extern`, `_`), which take
/// a trailing `_`; a leading digit takes a leading `_`.
pub(crate) fn rust_ident(name: &str) -> String {
    match name {
        "as" | "break" | "const" | "continue" | "else" | "enum" | "false" | "fn" | "for" | "if"
        | "impl" | "in" | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref"
        | "return" | "static" | "struct" | "trait" | "true" | "type" | "unsafe" | "use"
        | "where" | "while" | "dyn" | "abstract" | "become" | "box" | "do" | "final" | "macro"
        | "override" | "priv" | "typeof" | "unsized" | "virtual" | "yield" | "async" | "await"
        | "try" | "gen" => format!("r#{name}"),
        "_" | "super" | "self" | "Self" | "extern" | "crate" => format!("{name}_"),
        s if s.starts_with(|c: char| c.is_numeric()) => format!("_{name}"),
        _ => name.to_owned(),
    }
}

/// The Rust name of an RPC's method, module or field: `Match` -> `r#match` (prost's `to_snake`).
pub(crate) fn snake_ident(name: &str) -> String {
    rust_ident(&snake(name))
}

/// The Rust name of a message, enum or service: `Self` -> `Self_` (prost's `to_upper_camel`).
pub(crate) fn camel_ident(name: &str) -> String {
    rust_ident(&camel(name))
}

/// The file name of a module: `r#match` lives in `match.rs`.
pub(crate) fn file_stem(ident: &str) -> &str {
    ident.strip_prefix("r#").unwrap_or(ident)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALC: &str = r#"
syntax = "proto3";
// a comment with rpc Fake(A) returns (B);
package calc.v1;
import "google/protobuf/empty.proto";
option go_package = "./calc";
message AddRequest { int64 a = 1; int64 b = 2; }
message Num { int64 n = 1; }
/* block
   comment */
service Calculator {
  rpc Add(AddRequest) returns (Num);
  rpc Sum(stream Num) returns (Num) { option deprecated = true; }
  rpc Count (Num) returns (stream Num);
  rpc Chat(stream Num) returns (stream .calc.v1.Num);
  rpc Ping(google.protobuf.Empty) returns (google.protobuf.Empty);
}
"#;

    #[test]
    fn reads_package_services_and_streaming_kinds() {
        let p = parse(CALC).unwrap();
        assert_eq!(p.package, "calc.v1");
        assert_eq!(p.services.len(), 1);
        let s = &p.services[0];
        assert_eq!(s.name, "Calculator");
        let kinds: Vec<_> = s.rpcs.iter().map(|r| (r.name.as_str(), r.kind())).collect();
        assert_eq!(
            kinds,
            [
                ("Add", "unary"),
                ("Sum", "client streaming"),
                ("Count", "server streaming"),
                ("Chat", "bidirectional streaming"),
                ("Ping", "unary"),
            ]
        );
        assert_eq!(s.rpcs[3].response, "calc.v1.Num");
        assert_eq!(s.rpcs[4].request, "google.protobuf.Empty");
    }

    #[test]
    fn names_a_broken_rpc_by_line() {
        let e = parse("package x;\nservice S {\n  rpc A(B) returns C;\n}\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.to_string().contains("expected `(`"), "{e}");
    }

    #[test]
    fn converts_names_like_prost() {
        assert_eq!(snake("SayHello"), "say_hello");
        assert_eq!(snake("GetHTTPStatus"), "get_http_status");
        assert_eq!(snake("ping"), "ping");
        assert_eq!(snake("Add2Numbers"), "add2_numbers");
        assert_eq!(camel("sayHello"), "SayHello");
        assert_eq!(camel("Calculator"), "Calculator");
        // What heck 0.5 (prost-build's case conversion) gives for these.
        for (name, snake_case, camel_case) in [
            ("V2Get", "v2_get", "V2Get"),
            ("getV2", "get_v2", "GetV2"),
            ("HTTPRequest", "http_request", "HttpRequest"),
            ("Get2FA", "get2_fa", "Get2Fa"),
            ("ABC", "abc", "Abc"),
            ("x__y", "x_y", "XY"),
            ("Foo_Bar", "foo_bar", "FooBar"),
        ] {
            assert_eq!(snake(name), snake_case, "{name}");
            assert_eq!(camel(name), camel_case, "{name}");
        }
    }

    #[test]
    fn keywords_become_identifiers_like_prost() {
        assert_eq!(snake_ident("Match"), "r#match");
        assert_eq!(snake_ident("Type"), "r#type");
        assert_eq!(snake_ident("Self"), "self_");
        assert_eq!(snake_ident("Super"), "super_");
        assert_eq!(snake_ident("Crate"), "crate_");
        assert_eq!(snake_ident("Ping"), "ping");
        assert_eq!(camel_ident("Self"), "Self_");
        assert_eq!(camel_ident("type"), "Type");
        assert_eq!(file_stem("r#match"), "match");
        assert_eq!(file_stem("self_"), "self_");
    }

    #[test]
    fn reads_imports_and_top_level_types() {
        let p = parse(
            "package acme.inventory;\nimport \"common/money.proto\";\nimport public 'google/protobuf/timestamp.proto';\n\
             message Item { message Part {} enum Kind { A = 0; } }\nenum Color { RED = 0; }\n",
        )
        .unwrap();
        assert_eq!(
            p.imports,
            ["common/money.proto", "google/protobuf/timestamp.proto"]
        );
        assert_eq!(p.types, ["Item", "Color"]);
        assert!(p.defines_code());
        assert!(
            !parse("package a;\nimport \"b.proto\";")
                .unwrap()
                .defines_code()
        );
        let e = parse("import money;").unwrap_err();
        assert!(e.to_string().contains("quoted file name"), "{e}");
    }
}
