//! `taut._core.clamp_timeout`: the one gate every timeout passes, converting
//! any Python number-like value into `None` (no deadline) or a float in
//! `[0, MAX_TIMEOUT]`, with exact errors for what is not a timeout.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyString};

use crate::clamp::{clamp_secs, ClampError, MAX_TIMEOUT_SECS};

fn describe(value: &Bound<'_, PyAny>) -> String {
    let mut shown = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unrepresentable>".to_owned());
    if shown.len() > 80 {
        // A 400-digit int is a legal input; its full repr is not a useful message.
        let cut = (0..=77)
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
    format!("{shown} ({ty})")
}

fn type_error(name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "{name} must be a number of seconds or None, got {}",
        describe(value)
    ))
}

fn nan_error(name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!("{name} must not be NaN, got {}", describe(value)))
}

fn from_f64(name: &str, value: &Bound<'_, PyAny>, secs: f64) -> PyResult<Option<f64>> {
    clamp_secs(secs).map_err(|ClampError::NaN| nan_error(name, value))
}

/// For values too large for a float: only the sign matters.
fn by_sign(value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    Ok(Some(if value.gt(0)? { MAX_TIMEOUT_SECS } else { 0.0 }))
}

fn from_int(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    match value.extract::<i64>() {
        Ok(i) => from_f64(name, value, i as f64),
        Err(e) if e.is_instance_of::<PyOverflowError>(value.py()) => by_sign(value),
        Err(e) => Err(e),
    }
}

fn is_numpy_bool(value: &Bound<'_, PyAny>) -> bool {
    let ty = value.get_type();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    module == "numpy" && (name == "bool_" || name == "bool")
}

fn has_attr_on_type(value: &Bound<'_, PyAny>, attr: &str) -> bool {
    value.get_type().hasattr(attr).unwrap_or(false)
}

/// Normalise a timeout: `None`/`inf` -> `None`, `<= 0` -> `0.0`, otherwise a
/// float capped at `MAX_TIMEOUT`. See `_core.pyi` for the full contract.
#[pyfunction]
#[pyo3(signature = (value, /, *, name = "timeout"))]
pub fn clamp_timeout(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<f64>> {
    if value.is_none() {
        return Ok(None);
    }
    // bool is an int subclass, so it must be refused before the int path.
    if value.is_instance_of::<PyBool>() || is_numpy_bool(value) {
        return Err(type_error(name, value));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return from_f64(name, value, f.value());
    }
    if value.is_instance_of::<PyInt>() {
        return from_int(name, value);
    }
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyByteArray>()
    {
        return Err(type_error(name, value));
    }
    let py = value.py();
    // Looked up each time (a dict lookup in sys.modules, and only for the
    // rarer types), not cached in a PyOnceLock: such a cell is filled with the
    // GIL released for a moment, and a fork() from another thread then leaves
    // it locked for good in the child.
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    if value.is_instance(&timedelta)? {
        let secs: f64 = value.call_method0("total_seconds")?.extract()?;
        return from_f64(name, value, secs);
    }
    // Integer-like objects (numpy integers, user types) go through __index__
    // so that arbitrarily large values keep their exact sign.
    if has_attr_on_type(value, "__index__") {
        if let Ok(as_int) = value.call_method0("__index__") {
            return from_int(name, &as_int).map_err(|_| type_error(name, value));
        }
    }
    if !has_attr_on_type(value, "__float__") {
        return Err(type_error(name, value));
    }
    // Decimal, Fraction, numpy floats and other real numbers.
    match value.call_method0("__float__") {
        Ok(f) => {
            let secs: f64 = f.extract().map_err(|_| type_error(name, value))?;
            if secs.is_infinite() && !value.eq(secs)? {
                // A finite value beyond the float range (Decimal('1e400')):
                // huge, not infinite.
                return by_sign(value);
            }
            from_f64(name, value, secs)
        }
        // Fraction(10**400) cannot become a float but is still a number.
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => by_sign(value),
        // Decimal('sNaN') refuses float() with ValueError.
        Err(e) if e.is_instance_of::<PyValueError>(py) => {
            let is_nan = value
                .call_method0("is_nan")
                .and_then(|r| r.is_truthy())
                .unwrap_or(false);
            if is_nan {
                Err(nan_error(name, value))
            } else {
                Err(type_error(name, value))
            }
        }
        Err(_) => Err(type_error(name, value)),
    }
}
