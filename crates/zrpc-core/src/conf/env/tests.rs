use serde::Deserialize;

use super::expand;
use crate::conf::{ConfError, EtcdConf, Format, Validate, from_str_with_env};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields, default)]
struct Service {
    listen_on: String,
    etcd: EtcdConf,
    timeout: u64,
}

impl Validate for Service {
    fn validate(&self) -> Result<(), ConfError> {
        if self.listen_on.is_empty() {
            return Err(ConfError::missing("ListenOn"));
        }
        self.etcd.validate()
    }
}

fn load(text: &str, format: Format) -> Result<Service, ConfError> {
    let env = |name: &str| match name {
        "HOST" => Some("10.0.0.1".to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    from_str_with_env(text, format, "svc.yaml", env)
}

fn env(name: &str) -> Option<String> {
    match name {
        "HOST" => Some("10.0.0.1".to_owned()),
        "PORT" => Some("8080".to_owned()),
        _ => None,
    }
}

#[test]
fn expands_like_go() {
    assert_eq!(
        expand("ListenOn: ${HOST}:$PORT", env),
        "ListenOn: 10.0.0.1:8080"
    );
    assert_eq!(expand("a ${UNSET} b $UNSET c", env), "a  b  c");
    assert_eq!(expand("cost $ 5", env), "cost $ 5");
    assert_eq!(expand("end $", env), "end $");
    assert_eq!(expand("${HOST", env), "HOST");
    assert_eq!(expand("x${}y", env), "xy");
    assert_eq!(expand("$$", env), "");
    assert_eq!(expand("héllo ${PORT}é", env), "héllo 8080é");
    assert_eq!(expand("no vars", env), "no vars");
}

#[test]
fn an_unset_variable_is_named_with_its_key() {
    let e = load(
        "ListenOn: 0.0.0.0:8080\nEtcd:\n  Hosts: [127.0.0.1:2379]\n  Key: ${SERVICE_KEY}\n",
        Format::Yaml,
    )
    .unwrap_err();
    assert_eq!(e.path(), Some("Etcd.Key"));
    assert_eq!(
        e.to_string(),
        "config file svc.yaml: `Etcd.Key`: `${SERVICE_KEY}` expanded to an empty value (the \
         environment variable is not set); set SERVICE_KEY in the environment or write the \
         value in the file (the empty value gave: empty etcd key)"
    );
}

#[test]
fn an_empty_variable_in_a_required_key_or_a_list_is_named() {
    // a required key: was "field `ListenOn` is not set"
    let e = load("ListenOn: $LISTEN\n", Format::Yaml).unwrap_err();
    assert_eq!(
        e.to_string(),
        "config file svc.yaml: `ListenOn`: `$LISTEN` expanded to an empty value (the \
         environment variable is not set); set LISTEN in the environment or write the value \
         in the file (the empty value gave: the key is required)"
    );
    // a list item: was "invalid type: unit value, expected a string"
    let e = load(
        "ListenOn: :8080\nEtcd:\n  Hosts:\n  - ${ETCD_HOST}\n  Key: k\n",
        Format::Yaml,
    )
    .unwrap_err();
    assert_eq!(e.path(), Some("Etcd.Hosts[0]"));
    let e = e.to_string();
    assert!(
        e.contains("`Etcd.Hosts[0]`: `${ETCD_HOST}` expanded to an empty value (the environment variable is not set)")
            && e.contains("the empty value gave: invalid type: unit value, expected a string"),
        "{e}"
    );
    // in flow style, part of a value, set to the empty string, in JSON
    let e = load(
        "{ListenOn: x, Etcd: {Hosts: [h:1], Key: ${KEY}}}\n",
        Format::Yaml,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`Etcd.Key`: `${KEY}` expanded to an empty value"),
        "{e}"
    );
    let e = load("ListenOn: :1\nTimeout: ${EMPTY}x\n", Format::Yaml)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`Timeout`: `${EMPTY}` in `${EMPTY}x` expanded to an empty value (the environment variable is set to an empty string); set EMPTY"),
        "{e}"
    );
    let e = load(
        "{\"ListenOn\": \"${EMPTY}\", \"Etcd\": {\"Hosts\": [\"h:1\"], \"Key\": \"k\"}}",
        Format::Json,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`ListenOn`: `${EMPTY}` expanded to an empty value (the environment variable is set to an empty string)"),
        "{e}"
    );
}

#[test]
fn a_syntax_error_after_an_empty_variable_names_it() {
    let e = load(
        "{\"ListenOn\": \":1\", \"Timeout\": ${TIMEOUT}}",
        Format::Json,
    )
    .unwrap_err();
    assert!(matches!(e, ConfError::Syntax { .. }), "{e}");
    assert!(
        e.to_string().ends_with(
            "; `${TIMEOUT}` expanded to an empty value (the environment variable is not set), which may be the cause"
        ),
        "{e}"
    );
}

#[test]
fn set_variables_and_unrelated_errors_are_unchanged() {
    // go-zero's semantics: an unset variable is the empty string, and a load it does not
    // break succeeds
    let c = load(
        "ListenOn: ${HOST}:8080\nTimeout: ${TIMEOUT}\nEtcd:\n  Hosts: [h:1]\n  Key: k\n  User: $USER_UNSET\n",
        Format::Yaml,
    )
    .unwrap();
    assert_eq!((c.listen_on.as_str(), c.timeout), ("10.0.0.1:8080", 0));
    // an error at another key keeps its text
    let e = load("ListenOn: $UNSET\nTimeout: x\n", Format::Yaml).unwrap_err();
    assert!(matches!(e, ConfError::InvalidValue { .. }), "{e}");
    assert!(!e.to_string().contains("expanded"), "{e}");
    let e = load("Listen: ${UNSET}\n", Format::Yaml).unwrap_err();
    assert!(matches!(e, ConfError::UnknownKey { .. }), "{e}");
}

/// A config that loads with a variable that is not set warns, naming it; one set to the empty
/// string is taken as meant.
#[test]
fn a_config_that_loads_with_an_unset_variable_warns() {
    let text =
        "ListenOn: ${UNSET_KEY}0.0.0.0:8080$EMPTY\nEtcd:\n  Hosts: [127.0.0.1:2379]\n  Key: k\n";
    let lookup = |name: &str| (name == "EMPTY").then(String::new);
    let (_, empty) = super::expand_recording(text, lookup);
    let warnings = super::unset_warnings(&empty);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("${UNSET_KEY} is not set"),
        "{warnings:?}"
    );
    // No log is set up in this test's process: the load keeps the warning for the server,
    // which logs it once its log is.
    load(text, Format::Yaml).unwrap();
    let kept = crate::conf::take_load_warnings();
    assert!(
        kept.iter()
            .any(|w| w.starts_with("config file svc.yaml: ${UNSET_KEY} is not set")),
        "{kept:?}"
    );
}
