//! What values a benchmark parameter accepts, declared by its suite
//! ([`super::Suite::param_rule`]) so a bad value in a config file is refused
//! while the plan is built, before anything runs. Each rule points at the
//! list or parser the suite's `prepare` itself uses, so the two cannot drift;
//! `prepare` still checks every value as a second line of defence.

use crate::plan::{ParamValue, parse_shape};

/// The values one parameter accepts.
#[derive(Clone, Copy)]
pub enum ParamRule {
    /// One of these names; numbers compare by their written form, as the
    /// suites' `choice` helpers compare them.
    OneOf(&'static [&'static str]),
    /// An integer in `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Positive integers joined by `x`, as many as the named form has
    /// (`"MxKxN"`: three).
    Shape(&'static str),
    /// A positive integer, or `all` for every pool thread.
    Threads,
    /// The suite's own parser; the error says what is accepted.
    Check(fn(&ParamValue) -> Result<(), String>),
}

impl ParamRule {
    /// A positive integer (zero is meaningless: a size, a count, a batch).
    pub const POSITIVE: Self = Self::Int { min: 1, max: i64::MAX };
    /// A non-negative integer (zero means something, e.g. an empty cache).
    pub const NON_NEGATIVE: Self = Self::Int { min: 0, max: i64::MAX };

    /// Checks `value`; the error says what would be accepted (with the
    /// valid choices for a list).
    pub fn check(&self, value: &ParamValue) -> Result<(), String> {
        match *self {
            Self::OneOf(names) => one_of(value, names),
            Self::Int { min, max } => match value {
                ParamValue::Int(i) if (min..=max).contains(i) => Ok(()),
                _ if max == i64::MAX && min == 1 => Err("must be a positive integer".into()),
                _ if max == i64::MAX => Err(format!("must be an integer >= {min}")),
                _ => Err(format!("must be an integer from {min} to {max}")),
            },
            Self::Shape(form) => {
                let dims = form.split('x').count();
                match value {
                    ParamValue::Str(s) if parse_shape(s).is_ok_and(|d| d.len() == dims) => Ok(()),
                    _ => Err(format!("must be {form} ({dims} positive integers joined by x)")),
                }
            }
            Self::Threads => match value {
                ParamValue::Int(n) if *n >= 1 => Ok(()),
                ParamValue::Str(s) if s == "all" => Ok(()),
                _ => Err("must be a positive integer or \"all\"".into()),
            },
            Self::Check(f) => f(value),
        }
    }
}

/// Whether `value`, in its written form, is one of `names`; the error lists
/// them. For [`ParamRule::OneOf`] and for [`ParamRule::Check`]s whose list is
/// built at run time.
pub fn one_of(value: &ParamValue, names: &[&str]) -> Result<(), String> {
    if names.contains(&value.to_string().as_str()) {
        Ok(())
    } else {
        Err(format!("valid: {}", names.join(", ")))
    }
}

/// Checks one value of `suite`'s parameter `key` of `benchmark`; the error
/// names the benchmark, the parameter, the value and what is accepted.
pub fn check_value(
    suite: &dyn super::Suite,
    benchmark: &str,
    key: &str,
    value: &ParamValue,
) -> Result<(), String> {
    match suite.param_rule(benchmark, key) {
        None => Ok(()),
        Some(rule) => rule.check(value).map_err(|why| {
            let shown = match value {
                ParamValue::Str(s) => format!("\"{s}\""),
                other => other.to_string(),
            };
            format!("benchmark {}/{benchmark}: parameter `{key}` = {shown} is not valid; {why}", suite.name())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> ParamValue {
        ParamValue::Str(v.into())
    }

    #[test]
    fn lists_compare_written_forms_and_name_the_choices() {
        let r = ParamRule::OneOf(&["4", "64"]);
        assert!(r.check(&ParamValue::Int(64)).is_ok() && r.check(&s("4")).is_ok());
        assert_eq!(r.check(&s("8")).unwrap_err(), "valid: 4, 64");
        assert_eq!(r.check(&ParamValue::Bool(true)).unwrap_err(), "valid: 4, 64");
    }

    #[test]
    fn integers_refuse_zero_strings_and_fractions_where_asked() {
        let p = ParamRule::POSITIVE;
        assert!(p.check(&ParamValue::Int(1)).is_ok());
        for bad in [ParamValue::Int(0), ParamValue::Int(-3), ParamValue::Float(2.5), s("8")] {
            assert_eq!(p.check(&bad).unwrap_err(), "must be a positive integer", "{bad}");
        }
        assert!(ParamRule::NON_NEGATIVE.check(&ParamValue::Int(0)).is_ok());
        assert_eq!(
            ParamRule::NON_NEGATIVE.check(&ParamValue::Int(-1)).unwrap_err(),
            "must be an integer >= 0"
        );
        let stage = ParamRule::Int { min: 0, max: 3 };
        assert!(stage.check(&ParamValue::Int(3)).is_ok());
        assert_eq!(stage.check(&ParamValue::Int(4)).unwrap_err(), "must be an integer from 0 to 3");
    }

    #[test]
    fn shapes_need_their_dimension_count_and_threads_a_count_or_all() {
        let mm = ParamRule::Shape("MxKxN");
        assert!(mm.check(&s("2x3x4")).is_ok());
        for bad in [s("2x3"), s("2x0x4"), s("2xx4"), ParamValue::Int(8)] {
            assert_eq!(mm.check(&bad).unwrap_err(), "must be MxKxN (3 positive integers joined by x)");
        }
        let t = ParamRule::Threads;
        assert!(t.check(&ParamValue::Int(2)).is_ok() && t.check(&s("all")).is_ok());
        assert!(t.check(&ParamValue::Int(0)).is_err() && t.check(&s("some")).is_err());
    }
}
