//! Just enough of a `.proto` reader to scaffold: the package, and each service's RPCs with their
//! request/response types and streaming kinds. The real compilation is protoc's (zrpc-build);
//! a full parser (e.g. `protox`) would be a large dependency for these few facts.

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
    pub(crate) services: Vec<Service>,
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

/// `SayHello` -> `say_hello`, `GetHTTPStatus` -> `get_http_status` (prost's and tonic's
/// method names, heck's rules for the common cases).
pub(crate) fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let boundary = match prev {
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(|n| n.is_lowercase()),
                _ => false,
            };
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `say_hello` / `sayHello` -> `SayHello` (tonic's trait, server and stream type names).
pub(crate) fn camel(name: &str) -> String {
    snake(name)
        .split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
    }
}
