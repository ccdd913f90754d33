//! Every broker setting a KafkaCluster's `config` may set ([`kaas_shared::broker_settings`])
//! is one of this binary's flags: the operator passes it as that flag's environment variable,
//! and a variable no flag reads would be silently ignored.

use clap::CommandFactory;

use crate::Args;

#[test]
fn every_settable_key_reaches_a_flag() {
    let command = Args::command();
    let envs: Vec<String> = command.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect();
    for setting in kaas_shared::broker_settings::SETTINGS {
        assert!(envs.iter().any(|e| e == setting.env), "{} ({}) is no flag of kaas", setting.key, setting.env);
    }
}

#[test]
fn every_value_the_operator_accepts_parses() {
    use kaas_shared::broker_settings::ValueKind;
    // The smallest and largest values the operator accepts for each setting, as the broker
    // parses them (a bound of its own narrower than the operator's would refuse a rolled-out pod).
    for setting in kaas_shared::broker_settings::SETTINGS {
        let values = match setting.kind {
            ValueKind::Whole { min, max } => vec![min.to_string(), max.to_string()],
            ValueKind::Bool => vec!["false".to_owned()],
            ValueKind::OneOf(words) => words.iter().map(|w| (*w).to_owned()).collect(),
            ValueKind::Text => continue,
        };
        let command = Args::command();
        let flag = command.get_arguments().find(|a| a.get_env().is_some_and(|e| e == setting.env)).and_then(|a| a.get_long());
        let Some(flag) = flag else { panic!("{} ({}) is no flag of kaas", setting.key, setting.env) };
        for value in values {
            let parsed = Args::command().try_get_matches_from(["kaas", &format!("--{flag}={value}")]);
            assert!(parsed.is_ok(), "{}={value} (--{flag}): {:?}", setting.key, parsed.err());
        }
    }
}
