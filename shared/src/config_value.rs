//! Checks of a config value's text, shared by topic configs and broker settings. Each error is
//! words that complete "the value ...", so callers can name the config however they report it.

/// A whole number in `min..=max`.
pub fn whole(value: &str, min: i64, max: i64) -> Result<(), String> {
    let n: i64 = value
        .trim()
        .parse()
        .map_err(|_| "is not a whole number".to_owned())?;
    if n < min {
        return Err(format!("must be at least {min}"));
    }
    if n > max {
        return Err(format!("must be at most {max}"));
    }
    Ok(())
}

/// A number in `min..=max`.
pub fn number(value: &str, min: f64, max: f64) -> Result<(), String> {
    let n: f64 = value
        .trim()
        .parse()
        .map_err(|_| "is not a number".to_owned())?;
    if !(min..=max).contains(&n) {
        return Err(format!("must be between {min} and {max}"));
    }
    Ok(())
}

/// `true` or `false`, in any case.
pub fn boolean(value: &str) -> Result<(), String> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false") {
        Ok(())
    } else {
        Err("must be true or false".into())
    }
}

/// One of the `allowed` words.
pub fn one_of(value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value.trim()) {
        Ok(())
    } else {
        Err(format!("must be one of {}", allowed.join(", ")))
    }
}

/// A comma-separated list of `allowed` words (of any words when `allowed` is empty); empty
/// items are ignored, as Kafka's list parsing does.
pub fn list_of(value: &str, allowed: &[&str]) -> Result<(), String> {
    let unknown = value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .any(|item| !allowed.is_empty() && !allowed.contains(&item));
    if unknown {
        return Err(format!(
            "must be a comma-separated list of {}",
            allowed.join(", ")
        ));
    }
    Ok(())
}
