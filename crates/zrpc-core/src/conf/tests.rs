use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::*;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Conf {
    name: String,
    timeout: u64,
    ratio: f64,
    on: bool,
    #[serde(with = "duration")]
    slow: Duration,
    etcd: EtcdConf,
    inner: Inner,
    list: Vec<Item>,
    maybe: Option<Inner>,
    headers: BTreeMap<String, String>,
    mode: Mode,
}

impl Default for Conf {
    fn default() -> Self {
        Conf {
            name: String::new(),
            timeout: 2000,
            ratio: 1.0,
            on: true,
            slow: Duration::from_millis(500),
            etcd: EtcdConf::default(),
            inner: Inner::default(),
            list: Vec::new(),
            maybe: None,
            headers: BTreeMap::new(),
            mode: Mode::Pro,
        }
    }
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Inner {
    trace: bool,
    timeout: bool,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Item {
    full_method: String,
    #[serde(with = "duration")]
    timeout: Duration,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Dev,
    Pro,
}

impl Validate for Conf {
    fn validate(&self) -> Result<(), ConfError> {
        if self.timeout > 10_000 {
            return Err(ConfError::invalid("Timeout", "too large"));
        }
        if self.etcd.is_configured() {
            self.etcd.validate()?;
        }
        Ok(())
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn yaml(text: &str) -> Result<Conf, ConfError> {
    from_str_with_env(text, Format::Yaml, "app.yaml", no_env)
}

#[test]
fn loads_values_and_defaults() {
    let c = yaml(
        "Name: greet\nTimeout: 300\nSlow: 1m30s\nEtcd:\n  Hosts: [127.0.0.1:2379]\n  Key: greet.rpc\n  ID: 7\n\
         List:\n  - FullMethod: /a.B/C\n    Timeout: 5.5s\nHeaders: {x-a: b}\nMode: dev\n",
    )
    .unwrap();
    assert_eq!(c.name, "greet");
    assert_eq!(c.timeout, 300);
    assert_eq!(c.slow, Duration::from_secs(90));
    assert_eq!(c.etcd.id, 7);
    assert_eq!(c.list[0].timeout, Duration::from_millis(5500));
    assert_eq!(c.headers["x-a"], "b");
    assert_eq!(c.mode, Mode::Dev);
    assert!(c.on);
    assert_eq!(c.inner, Inner::default());
    assert_eq!(c.maybe, None);
}

#[test]
fn keys_are_case_insensitive() {
    let c = yaml(
        "name: a\nTIMEOUT: 5\netcd: {hosts: [h:1], key: k, id: 3, cacertfile: ca}\nInner: {tRaCe: true}\n",
    );
    let c = c.unwrap_err();
    // partial TLS in the etcd block: proves `cacertfile` reached `CACertFile`
    assert!(c.to_string().contains("Etcd.CACertFile set"), "{c}");
    let c =
        yaml("name: a\nTIMEOUT: 5\netcd: {hosts: [h:1], key: k, id: 3}\nInner: {tRaCe: true}\n")
            .unwrap();
    assert_eq!(
        (c.name.as_str(), c.timeout, c.etcd.id, c.inner.trace),
        ("a", 5, 3, true)
    );
}

#[test]
fn duplicate_keys_differing_in_case_fail() {
    let e = yaml("Name: a\nname: b\n").unwrap_err();
    assert!(matches!(e, ConfError::DuplicateKey { .. }), "{e}");
    assert_eq!(e.path(), Some("Name"));
}

#[test]
fn unknown_key_names_path_file_and_suggestion() {
    let e = yaml("Name: a\nInner:\n  Tiemout: true\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file app.yaml: unknown key `Inner.Tiemout` (did you mean `Timeout`?)"
    );
    let e = yaml("Zzzzzz: 1\n").unwrap_err();
    assert_eq!(e.to_string(), "config file app.yaml: unknown key `Zzzzzz`");
    let e = yaml("List:\n  - FullMethd: /a.B/C\n").unwrap_err();
    assert_eq!(e.path(), Some("List[0].FullMethd"));
    assert!(e.to_string().contains("did you mean `FullMethod`?"), "{e}");
}

#[test]
fn wrong_types_name_path_and_value() {
    let e = yaml("Timeout: abc\n").unwrap_err();
    assert_eq!(e.path(), Some("Timeout"));
    assert!(e.to_string().contains("string \"abc\""), "{e}");
    let e = yaml("Inner: 5\n").unwrap_err();
    assert_eq!(e.path(), Some("Inner"));
    let e = yaml("Etcd: {Hosts: [h], Key: k, ID: x}\n").unwrap_err();
    assert_eq!(e.path(), Some("Etcd.ID"));
    let e = yaml("Mode: prod\n").unwrap_err();
    assert!(e.to_string().contains("did you mean `pro`?"), "{e}");
    let e = yaml("Timeout: -1\n").unwrap_err();
    assert_eq!(e.path(), Some("Timeout"));
}

#[test]
fn bad_duration_is_an_error() {
    let e = yaml("Slow: 5 sec\n").unwrap_err();
    assert_eq!(e.path(), Some("Slow"));
    assert!(e.to_string().contains("invalid duration \"5 sec\""), "{e}");
    let e = yaml("List: [{FullMethod: /a.B/C, Timeout: 5}]\n").unwrap();
    assert_eq!(
        e.list[0].timeout,
        Duration::from_nanos(5),
        "integers are nanoseconds"
    );
}

#[test]
fn lenient_scalars() {
    let c = yaml("Name: 123\nTimeout: \"400\"\nOn: \"false\"\nRatio: 1\n").unwrap();
    assert_eq!(c.name, "123");
    assert_eq!(c.timeout, 400);
    assert!(!c.on);
    assert!((c.ratio - 1.0).abs() < f64::EPSILON);
}

#[test]
fn env_expansion() {
    let env = |k: &str| (k == "T").then(|| "900".to_owned());
    let c: Conf =
        from_str_with_env("Timeout: ${T}\nName: x$UNSET\n", Format::Yaml, "", env).unwrap();
    assert_eq!((c.timeout, c.name.as_str()), (900, "x"));
}

#[test]
fn validation_runs_and_names_the_file() {
    let e = yaml("Timeout: 20000\n").unwrap_err();
    assert_eq!(e.to_string(), "config file app.yaml: `Timeout`: too large");
}

#[test]
fn json_and_toml() {
    let c: Conf = from_str_with_env(
        r#"{"name": "j", "Slow": "2s", "Etcd": {"Hosts": ["h:1"], "Key": "k"}}"#,
        Format::Json,
        "a.json",
        no_env,
    )
    .unwrap();
    assert_eq!((c.name.as_str(), c.slow), ("j", Duration::from_secs(2)));
    #[cfg(feature = "toml")]
    toml_loads();
    let e =
        from_str_with_env::<Conf, _>("{\"Nme\": 1}", Format::Json, "a.json", no_env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file a.json: unknown key `Nme` (did you mean `Name`?)"
    );
}

#[cfg(feature = "toml")]
fn toml_loads() {
    let c: Conf = from_str_with_env(
        "Name = \"t\"\nSlow = \"3s\"\n[Etcd]\nHosts = [\"h:1\"]\nKey = \"k\"\n[[List]]\nFullMethod = \"/a.B/C\"\nTimeout = \"1s\"\n",
        Format::Toml,
        "a.toml",
        no_env,
    )
    .unwrap();
    assert_eq!(
        (c.name.as_str(), c.slow, c.list.len()),
        ("t", Duration::from_secs(3), 1)
    );
}

#[cfg(not(feature = "toml"))]
#[test]
fn a_toml_file_without_the_toml_feature_names_it() {
    let e = from_str_with_env::<Conf, _>("Name = \"t\"\n", Format::Toml, "a.toml", no_env)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("config file a.toml: ")
            && e.contains(".toml")
            && e.contains("`toml` cargo feature"),
        "{e}"
    );
}

#[test]
fn syntax_errors_and_empty_files() {
    let e = yaml("Name: [unclosed\n").unwrap_err();
    assert!(matches!(e, ConfError::Syntax { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("config file app.yaml: syntax error"),
        "{e}"
    );
    assert_eq!(yaml("").unwrap(), Conf::default());
    assert_eq!(yaml("# only a comment\n").unwrap(), Conf::default());
    let e = from_str_with_env::<Conf, _>("{", Format::Json, "a.json", no_env).unwrap_err();
    assert!(matches!(e, ConfError::Syntax { .. }));
    #[cfg(feature = "toml")]
    {
        let e = from_str_with_env::<Conf, _>("x = ", Format::Toml, "a.toml", no_env).unwrap_err();
        assert!(matches!(e, ConfError::Syntax { .. }));
    }
    let e = yaml("- just\n- a list\n").unwrap_err();
    assert_eq!(e.path(), Some("<top level>"));
}

#[test]
fn format_by_extension() {
    assert_eq!(Format::from_path("a/b.YML").unwrap(), Format::Yaml);
    assert_eq!(Format::from_path("b.json").unwrap(), Format::Json);
    assert_eq!(Format::from_path("b.toml").unwrap(), Format::Toml);
    assert_eq!(Format::from_path("b.JSON5").unwrap(), Format::Json5);
    let e = Format::from_path("b.ini").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file b.ini: unrecognized file type `.ini` (expected .yaml, .yml, .json, .json5 or .toml)"
    );
    assert!(Format::from_path("noext").is_err());
}

#[test]
fn load_reads_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.yaml");
    std::fs::write(&p, "Name: file\n").unwrap();
    let c: Conf = load(&p).unwrap();
    assert_eq!(c.name, "file");
    let e = load::<Conf>(dir.path().join("missing.yaml")).unwrap_err();
    assert!(matches!(e, ConfError::Io { .. }), "{e}");
}

#[test]
fn suggestions_need_to_be_close() {
    assert_eq!(
        suggest::closest("Tiemout", &["Timeout", "Trace"]),
        Some("Timeout")
    );
    assert_eq!(
        suggest::closest("listenon", &["ListenOn"]),
        Some("ListenOn")
    );
    assert_eq!(suggest::closest("Foo", &["Timeout", "Trace"]), None);
    assert_eq!(suggest::edit_distance("abc", "acb"), 1);
    assert_eq!(suggest::edit_distance("", "abc"), 3);
}

#[test]
fn never_panics_on_odd_yaml() {
    for text in [
        "? [a, b]\n: 1\n",
        "Name: !tag x\n",
        "Etcd: ~\n",
        "List: ~\n",
        "Headers: ~\n",
        "Maybe: ~\n",
        "&a {Name: x}\n",
        "Inner: {<<: {Trace: true}}\n",
        "Timeout: 1e400\n",
        "Timeout: 99999999999999999999999\n",
        "Slow: 9999999999999999999h\n",
        "Mode: {dev: 1}\n",
        "Mode: [dev]\n",
    ] {
        let _ = yaml(text);
    }
    let c = yaml("Inner: {<<: {Trace: true}}\n").unwrap();
    assert!(c.inner.trace, "merge keys apply");
    // A sequence or mapping as a key is an unknown key, named in flow style.
    let e = yaml("? [a, {b: 1}]\n: 1\n").unwrap_err().to_string();
    assert!(e.contains("[a, {b: 1}]"), "{e}");
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct App {
    greeting: String,
    inner: Inner,
}

impl Validate for App {
    fn validate(&self) -> Result<(), ConfError> {
        if self.greeting == "bad" {
            return Err(ConfError::invalid("Greeting", "bad greeting"));
        }
        Ok(())
    }
}

fn embed(text: &str) -> Result<Embed<Conf, App>, ConfError> {
    from_str_with_env(text, Format::Yaml, "app.yaml", no_env)
}

#[test]
fn embed_reads_both_parts_case_insensitively() {
    let c = embed("name: svc\ngreeting: hi\nInner: {trace: true}\nslow: 2s\n").unwrap();
    assert_eq!(c.base.name, "svc");
    assert_eq!(c.base.slow, Duration::from_secs(2));
    assert_eq!(c.extra.greeting, "hi");
    assert!(
        c.base.inner.trace && c.extra.inner.trace,
        "a key both know goes to both"
    );
}

#[test]
fn embed_unknown_key_is_unknown_to_both() {
    let e = embed("Name: svc\nGreetng: hi\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file app.yaml: unknown key `Greetng` (did you mean `Greeting`?)"
    );
    assert!(matches!(e, ConfError::UnknownKey { .. }));
    let e = embed("Name: svc\nInner: {Tiemout: true}\n").unwrap_err();
    assert_eq!(e.path(), Some("Inner.Tiemout"));
    let e = embed("Slow: 5 sec\n").unwrap_err();
    assert!(matches!(e, ConfError::InvalidValue { .. }), "{e}");
    assert_eq!(e.path(), Some("Slow"));
}

#[test]
fn embed_validates_both_parts() {
    let e = embed("Greeting: bad\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file app.yaml: `Greeting`: bad greeting"
    );
    let e = embed("Timeout: 20000\n").unwrap_err();
    assert_eq!(e.path(), Some("Timeout"));
}

#[test]
fn embed_works_with_other_deserializers() {
    let c: Embed<Conf, App> = serde_json::from_str(r#"{"name": "j", "Greeting": "g"}"#).unwrap();
    assert_eq!(
        (c.base.name.as_str(), c.extra.greeting.as_str()),
        ("j", "g")
    );
    let e = serde_json::from_str::<Embed<Conf, App>>(r#"{"Nam": "j"}"#).unwrap_err();
    assert!(
        e.to_string()
            .contains("unknown key `Nam` (did you mean `Name`?)"),
        "{e}"
    );
}

proptest::proptest! {
    #[test]
    fn never_panics_on_random_text(text in "\\PC{0,200}") {
        for format in [Format::Yaml, Format::Json, Format::Toml] {
            let _ = from_str_with_env::<Conf, _>(&text, format, "fuzz", no_env);
            let _ = from_str_with_env::<Embed<Conf, App>, _>(&text, format, "fuzz", no_env);
        }
    }

    #[test]
    fn never_panics_on_random_yaml_values(
        key in "[A-Za-z]{1,10}",
        value in "[ -~]{0,30}",
    ) {
        let text = format!("{key}: {value}\nInner:\n  {key}: {value}\nList:\n- {key}: {value}\n");
        let _ = from_str_with_env::<Conf, _>(&text, Format::Yaml, "fuzz", no_env);
    }

    #[test]
    fn duration_parse_never_panics(s in "[0-9.a-zµ+-]{0,20}") {
        let _ = duration::parse(&s);
    }
}

#[test]
fn a_key_without_value_is_absent() {
    let c = yaml("Name:\nTimeout:\nSlow:\nEtcd:\nInner:\nMaybe:\nMode:\n").unwrap();
    assert_eq!(c, Conf::default());
    let e = yaml("Bogus:\n").unwrap_err();
    assert!(matches!(e, ConfError::UnknownKey { .. }), "{e}");
    let e = yaml("Name:\nname: x\n").unwrap_err();
    assert!(matches!(e, ConfError::DuplicateKey { .. }), "{e}");
    let c: Conf = from_str_with_env(
        r#"{"Timeout": null, "Name": "n"}"#,
        Format::Json,
        "",
        no_env,
    )
    .unwrap();
    assert_eq!((c.timeout, c.name.as_str()), (2000, "n"));
}

#[test]
fn a_top_level_unknown_key_carries_the_types_note() {
    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
    struct Noted {
        name: String,
        inner: Inner,
    }
    impl Validate for Noted {
        fn validate(&self) -> Result<(), ConfError> {
            Ok(())
        }
        fn unknown_key_note() -> Option<&'static str> {
            Some("your own keys go elsewhere")
        }
    }
    let load = |text: &str| from_str_with_env::<Noted, _>(text, Format::Yaml, "app.yaml", no_env);
    let e = load("Nme: a\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file app.yaml: unknown key `Nme` (did you mean `Name`?); your own keys go elsewhere"
    );
    // a nested key is a typo in a block the type owns: no note
    let e = load("Inner: {Trce: true}\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file app.yaml: unknown key `Inner.Trce` (did you mean `Trace`?)"
    );
    // the note is the loaded type's: embedded, the other part may know the key
    let e = from_str_with_env::<Embed<Noted, Conf>, _>("Zzzzzz: 1\n", Format::Yaml, "", no_env)
        .unwrap_err();
    assert_eq!(e.to_string(), "unknown key `Zzzzzz`");
}

/// A service's config with a block of its own that embeds one of zrpc's (as `UserRpc:
/// RpcClientConf` holds an `Etcd`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Service {
    user_rpc: Registry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Registry {
    etcd: EtcdConf,
}

impl Validate for Registry {
    fn validate(&self) -> Result<(), ConfError> {
        self.etcd.validate()
    }
}

impl Validate for Service {
    fn validate(&self) -> Result<(), ConfError> {
        self.user_rpc.validate_at("UserRpc")
    }

    fn unknown_key_note() -> Option<&'static str> {
        Some("add a field to `Config` in src/config.rs")
    }
}

#[test]
fn a_nested_block_names_its_full_key_path() {
    let text = "Etcd: {Hosts: [127.0.0.1:2379], Key: shop.rpc}\n\
                UserRpc: {Etcd: {Hosts: [127.0.0.1:2379]}}\n";
    let e = from_str_with_env::<Embed<Conf, Service>, _>(text, Format::Yaml, "shop.yaml", no_env)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file shop.yaml: `UserRpc.Etcd.Key`: empty etcd key"
    );
    assert_eq!(ConfError::missing("").at("UserRpc").path(), Some("UserRpc"));
    assert_eq!(
        ConfError::invalid("[0].Key", "x").at("Hosts").path(),
        Some("Hosts[0].Key")
    );
}

#[test]
fn an_embedding_config_gives_its_own_unknown_key_note() {
    let e = from_str_with_env::<Embed<Conf, Service>, _>(
        "DataSource: x\n",
        Format::Yaml,
        "shop.yaml",
        no_env,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file shop.yaml: unknown key `DataSource`; add a field to `Config` in src/config.rs"
    );
}

/// Remembers the file it was loaded from, as zrpc's server and client configs do.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Remembers {
    user_rpc: Registry,
    #[serde(skip)]
    file: ConfFile,
}

impl Validate for Remembers {
    fn validate(&self) -> Result<(), ConfError> {
        Ok(())
    }

    fn loaded_from(&mut self, file: &str) {
        self.file.set(file);
    }
}

#[test]
fn a_loaded_config_learns_its_file_and_embed_tells_both_parts() {
    let r: Remembers =
        from_str_with_env("UserRpc: {}\n", Format::Yaml, "shop.yaml", no_env).unwrap();
    assert_eq!(r.file.get(), Some("shop.yaml"));
    let e: Embed<Remembers, App> =
        from_str_with_env("Greeting: hi\n", Format::Yaml, "shop.yaml", no_env).unwrap();
    assert_eq!(e.base.file.get(), Some("shop.yaml"));
    // no origin, no file
    let r: Remembers = from_str_with_env("{}", Format::Json, "", no_env).unwrap();
    assert_eq!(r.file.get(), None);
}

/// Aliases that multiply a file's values (25 KB of YAML, 25 million values) are refused with a
/// clear error before any tree is built; a config's own aliases still load.
#[test]
fn a_yaml_file_that_expands_too_far_is_refused() {
    let items = vec!["0"; 5000].join(",");
    let aliases = vec!["*a"; 5000].join(",");
    let text = format!("A: &a [{items}]\nB: [{aliases}]\n");
    let started = std::time::Instant::now();
    let e = yaml(&text).unwrap_err().to_string();
    assert!(e.contains("expands to more than 1000000 values"), "{e}");
    println!("refused in {:?}: {e}", started.elapsed());
    let c = yaml("Inner: &i {Trace: true}\nMaybe: *i\n").unwrap();
    assert_eq!(c.maybe, Some(c.inner));
}

/// A JSON5 file nested deeper than serde_json allows is refused, not a stack overflow (the
/// json5 parser recurses without a limit); brackets in strings and comments do not count.
#[cfg(feature = "json5")]
#[test]
fn a_json5_file_nested_too_deep_is_refused() {
    let json5 = |text: &str| from_str_with_env::<Conf, _>(text, Format::Json5, "app.json5", no_env);
    let deep = "[".repeat(200_000);
    let e = json5(&format!("{{Name: {deep}}}")).unwrap_err().to_string();
    assert!(e.contains("nested more than 128 deep at line 1"), "{e}");
    let c =
        json5("// [[[[ a comment\n/* {{{{ */ {Name: '[[[[{{{{', Inner: {Trace: true}}\n").unwrap();
    assert_eq!(c.name, "[[[[{{{{");
    assert!(c.inner.trace);
}
