//! `taut._core.clamp_timeout`: the one gate every timeout passes, converting
//! any Python number-like value into `None` (no deadline) or a float in
//! `[0, MAX_TIMEOUT]`, with exact errors for what is not a timeout; and
//! `_seconds`, the same conversion with the sign kept (for parameters that
//! refuse negatives, and absolute deadlines). `taut._checks` builds every
//! public parameter check on these two.
//!
//! Error contract: a value that is not a number of seconds is a `TypeError`,
//! NaN a `ValueError`; both name the parameter, the value and its type. An
//! `Exception` raised by the value's own methods (`__float__`, `__index__`,
//! `__gt__`, ...) becomes that `TypeError` (with the original as its cause);
//! a `BaseException` that is not an `Exception` (`KeyboardInterrupt`,
//! `SystemExit`) propagates unchanged. Never `OverflowError`.

use pyo3::exceptions::{PyException, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyString};

use crate::clamp::{clamp_secs, ClampError};

/// `repr(value) (type)` for an error message, the repr cut to `max_len`
/// bytes (a 400-digit int is a legal input; its full repr is not a useful
/// message). A failing `repr` is shown as such, unless it raised a
/// `BaseException` that must propagate. Every binding names bad values this way.
pub(crate) fn describe(value: &Bound<'_, PyAny>, max_len: usize) -> PyResult<String> {
    let py = value.py();
    let mut shown = match value.repr() {
        Ok(r) => r.to_string(),
        Err(e) if !e.is_instance_of::<PyException>(py) => return Err(e),
        Err(_) => "<unrepresentable>".to_owned(),
    };
    if shown.len() > max_len {
        let cut = (0..=max_len.saturating_sub(3))
            .rev()
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str("...");
    }
    let ty = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    Ok(format!("{shown} ({ty})"))
}

fn type_error(name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    match describe(value, 80) {
        Ok(shown) => PyTypeError::new_err(format!(
            "{name} must be a number of seconds or None, got {shown}"
        )),
        Err(fatal) => fatal,
    }
}

fn nan_error(name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    match describe(value, 80) {
        Ok(shown) => PyValueError::new_err(format!("{name} must not be NaN, got {shown}")),
        Err(fatal) => fatal,
    }
}

/// What an error raised by the value's own code becomes: `KeyboardInterrupt`
/// and friends unchanged, any `Exception` the parameter's `TypeError`.
fn from_value_code(name: &str, value: &Bound<'_, PyAny>, err: PyErr) -> PyErr {
    let py = value.py();
    if !err.is_instance_of::<PyException>(py) {
        return err;
    }
    let wrapped = type_error(name, value);
    if wrapped.is_instance_of::<PyTypeError>(py) {
        wrapped.set_cause(py, Some(err));
    }
    wrapped
}

/// The sign of a value too large for a float, as `f64::MAX` or `-f64::MAX`:
/// huge, but finite (it is not `inf`, which means "no deadline").
fn huge(positive: bool) -> f64 {
    if positive {
        f64::MAX
    } else {
        -f64::MAX
    }
}

/// An exact `int` (never a subclass: its `__gt__` would be user code) as seconds.
fn from_exact_int(name: &str, value: &Bound<'_, PyAny>, int: &Bound<'_, PyAny>) -> PyResult<f64> {
    match int.extract::<i64>() {
        Ok(i) => Ok(i as f64),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
            let positive = int.gt(0).map_err(|e| from_value_code(name, value, e))?;
            Ok(huge(positive))
        }
        Err(e) => Err(from_value_code(name, value, e)),
    }
}

fn is_numpy(value: &Bound<'_, PyAny>, names: &[&str]) -> bool {
    let ty = value.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    module == "numpy" && names.contains(&name.as_str())
}

fn has_attr_on_type(value: &Bound<'_, PyAny>, attr: &str) -> bool {
    value.get_type().hasattr(attr).unwrap_or(false)
}

/// Any accepted value as signed seconds: `None` only for `None`; `inf`/`-inf`
/// as given; finite values beyond the float range as `±f64::MAX`. NaN is an
/// error here, so no caller ever sees it.
fn to_secs(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    if value.is_none() {
        return Ok(None);
    }
    let secs = to_secs_inner(value, name)?;
    if secs.is_nan() {
        return Err(nan_error(name, value));
    }
    Ok(Some(secs))
}

fn to_secs_inner(value: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    // The common cases first, before the type-name lookups below: an exact
    // float or int is never a bool, a string or a numpy type.
    if let Ok(f) = value.cast_exact::<PyFloat>() {
        return Ok(f.value());
    }
    if value.is_exact_instance_of::<PyInt>() {
        return from_exact_int(name, value, value);
    }
    let py = value.py();
    // bool is an int subclass, so it must be refused before the int path.
    if value.is_instance_of::<PyBool>() || is_numpy(value, &["bool_", "bool", "datetime64"]) {
        return Err(type_error(name, value));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(f.value());
    }
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
    {
        return Err(type_error(name, value));
    }
    if value.is_exact_instance_of::<PyInt>() {
        return from_exact_int(name, value, value);
    }
    let wrap = |e: PyErr| from_value_code(name, value, e);
    // Integers (subclasses and numpy integers too) through operator.index:
    // it returns an exact int, so no overridden comparison runs, and the
    // sign of arbitrarily large values stays exact.
    if value.is_instance_of::<PyInt>() || has_attr_on_type(value, "__index__") {
        let int = py
            .import("operator")?
            .getattr("index")?
            .call1((value,))
            .map_err(wrap)?;
        return from_exact_int(name, value, &int);
    }
    // Looked up each time (a dict lookup in sys.modules, and only for the
    // rarer types), not cached in a PyOnceLock: such a cell is filled with the
    // GIL released for a moment, and a fork() from another thread then leaves
    // it locked for good in the child.
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    if value.is_instance(&timedelta)? {
        // total_seconds() of the base class: a subclass cannot make it lie or raise.
        let secs = timedelta
            .getattr("total_seconds")?
            .call1((value,))
            .and_then(|s| s.extract::<f64>())
            .map_err(wrap)?;
        return Ok(secs);
    }
    if is_numpy(value, &["timedelta64"]) {
        // Its float() is a count of its own unit (5 ms would be 5.0): divide
        // by one second of the same type instead. NaT becomes NaN.
        let second = value.get_type().call1((1, "s")).map_err(wrap)?;
        return value
            .call_method1("__truediv__", (second,))
            .and_then(|s| s.extract::<f64>())
            .map_err(wrap);
    }
    if !has_attr_on_type(value, "__float__") {
        return Err(type_error(name, value));
    }
    // Decimal, Fraction, numpy floats and other real numbers.
    match value.call_method0("__float__") {
        Ok(f) => {
            let secs: f64 = f.extract().map_err(wrap)?;
            if secs.is_infinite() {
                // A finite value beyond the float range (Decimal('1e400')) is
                // huge, not infinite: ask the value itself.
                let is_inf = value.eq(secs).map_err(wrap)?;
                if !is_inf {
                    return Ok(huge(value.gt(0).map_err(wrap)?));
                }
            }
            Ok(secs)
        }
        // Fraction(10**400) cannot become a float but is still a number.
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => Ok(huge(value.gt(0).map_err(wrap)?)),
        // Decimal('sNaN') refuses float() with ValueError.
        Err(e) if e.is_instance_of::<PyValueError>(py) => {
            let is_nan = match value.call_method0("is_nan").and_then(|r| r.is_truthy()) {
                Ok(b) => b,
                Err(fatal) if !fatal.is_instance_of::<PyException>(py) => return Err(fatal),
                Err(_) => false,
            };
            if is_nan {
                Ok(f64::NAN)
            } else {
                Err(wrap(e))
            }
        }
        Err(e) => Err(wrap(e)),
    }
}

/// An int argument within `lo..=hi`: `TypeError` for a bool or a non-int,
/// `ValueError` (never `OverflowError`) for an int out of range.
pub(crate) fn int_in(
    name: &str,
    value: &Bound<'_, PyAny>,
    lo: i64,
    hi: i64,
    what: &str,
) -> PyResult<i64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be {what} (int), got {}",
            describe(value, 40)?
        )));
    }
    let out_of_range = || -> PyResult<i64> {
        Err(PyValueError::new_err(format!(
            "{name} must be {what} between {lo} and {hi}, got {}",
            describe(value, 40)?
        )))
    };
    match value.extract::<i64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        Ok(_) => out_of_range(),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => out_of_range(),
        Err(e) => Err(e),
    }
}

/// `int_in` for a value that may use all 64 bits unsigned (a thread ident,
/// C's `unsigned long`): `TypeError` for a bool or a non-int, `ValueError`
/// (never `OverflowError`) for a negative or too large int.
pub(crate) fn u64_in(name: &str, value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be {what} (int), got {}",
            describe(value, 40)?
        )));
    }
    match value.extract::<u64>() {
        Ok(n) => Ok(n),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => {
            Err(PyValueError::new_err(format!(
                "{name} must be {what} between 0 and {}, got {}",
                u64::MAX,
                describe(value, 40)?
            )))
        }
        Err(e) => Err(e),
    }
}

/// Normalise a timeout: `None`/`inf` -> `None`, `<= 0` -> `0.0`, otherwise a
/// float capped at `MAX_TIMEOUT`. See `_core.pyi` for the full contract.
#[pyfunction]
#[pyo3(signature = (value, /, *, name = "timeout"))]
pub fn clamp_timeout(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    match to_secs(value, name)? {
        None => Ok(None),
        Some(secs) => clamp_secs(secs).map_err(|ClampError::NaN| nan_error(name, value)),
    }
}

/// The checked seconds of `value` with its sign: `None` for `None`, `inf` and
/// `-inf` as given, finite values beyond the float range as `±1.7976931348623157e308`.
/// Not clamped (callers decide what negative or huge means for them).
#[pyfunction]
#[pyo3(signature = (value, /, *, name = "timeout"))]
pub fn _seconds(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    to_secs(value, name)
}
