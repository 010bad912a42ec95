//! The per-render budget the sandbox's functions, filters and writer draw from.
//!
//! tera calls functions and filters through a shared, immutable engine, so the
//! budget of the render in progress is installed in a thread-local for the duration
//! of that render (tera renders on the calling thread). When a bound trips, the
//! budget remembers which one, so the error names the limit however tera wraps it.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::Instant;

use super::{Limit, Limits, TemplateKind};

/// A value written by an interpolation during a render: its escaped text, which
/// template part wrote it and which interpolation of that part's source.
pub(crate) struct Written {
    pub text: String,
    pub part: usize,
    pub interpolation: usize,
}

pub(crate) struct Budget {
    limits: Limits,
    deadline: Instant,
    iterations_left: Cell<u64>,
    output_left: Cell<usize>,
    tripped: Cell<Option<Limit>>,
    refused: RefCell<Option<String>>,
    /// The render's random sentinel prefix (see `crate::verify`).
    pub(crate) prefix: String,
    /// The template part being rendered.
    pub(crate) part: Cell<usize>,
    /// Values written so far, per kind, in render order: a value's index here is
    /// its sentinel's number.
    pub(crate) written: [RefCell<Vec<Written>>; 2],
}

impl Budget {
    pub(crate) fn new(limits: Limits) -> Rc<Budget> {
        Rc::new(Budget {
            limits,
            deadline: Instant::now() + limits.time_limit,
            iterations_left: Cell::new(limits.max_loop_iterations),
            output_left: Cell::new(limits.max_output_bytes),
            tripped: Cell::new(None),
            refused: RefCell::new(None),
            prefix: crate::verify::sentinel_prefix(),
            part: Cell::new(0),
            written: [RefCell::new(Vec::new()), RefCell::new(Vec::new())],
        })
    }

    /// Records an escaped value and returns the sentinel written in its place.
    /// The output budget is charged for the value, not the sentinel: the writer
    /// charges the sentinel's bytes right after, so they are credited here.
    pub(crate) fn write(&self, kind: TemplateKind, text: String, interpolation: usize) -> Result<String, Limit> {
        let mut written = self.written[kind_slot(kind)].borrow_mut();
        let sentinel = crate::verify::sentinel(&self.prefix, written.len());
        let left = self.output_left.get().saturating_add(sentinel.len());
        if text.len() > left {
            return Err(self.trip(Limit::Output {
                limit: self.limits.max_output_bytes,
            }));
        }
        self.output_left.set(left - text.len());
        written.push(Written {
            text,
            part: self.part.get(),
            interpolation,
        });
        Ok(sentinel)
    }

    /// The first bound that tripped, if any.
    pub(crate) fn tripped(&self) -> Option<Limit> {
        self.tripped.get()
    }

    /// Why a value could not be written, if that is what stopped the render.
    pub(crate) fn refused(&self) -> Option<String> {
        self.refused.borrow().clone()
    }

    /// Records that a value cannot be written where the template puts it.
    pub(crate) fn refuse(&self, reason: String) -> tera::Error {
        let error = tera::Error::msg(reason.clone());
        self.refused.borrow_mut().get_or_insert(reason);
        error
    }

    fn trip(&self, limit: Limit) -> Limit {
        if self.tripped.get().is_none() {
            self.tripped.set(Some(limit));
        }
        limit
    }

    pub(crate) fn check_time(&self) -> Result<(), Limit> {
        if Instant::now() >= self.deadline {
            return Err(self.trip(Limit::Time {
                limit: self.limits.time_limit,
            }));
        }
        Ok(())
    }

    /// Charges one loop iteration.
    pub(crate) fn tick(&self) -> Result<(), Limit> {
        let left = self.iterations_left.get();
        if left == 0 {
            return Err(self.trip(Limit::LoopIterations {
                limit: self.limits.max_loop_iterations,
            }));
        }
        self.iterations_left.set(left - 1);
        self.check_time()
    }

    /// The largest value a filter or function may produce.
    pub(crate) fn max_value_bytes(&self) -> usize {
        self.limits.max_value_bytes
    }

    /// Fails when a value of `size` bytes would be larger than allowed.
    pub(crate) fn check_value_size(&self, size: usize) -> Result<(), Limit> {
        if size > self.limits.max_value_bytes {
            return Err(self.trip(Limit::ValueSize {
                limit: self.limits.max_value_bytes,
            }));
        }
        Ok(())
    }

    pub(crate) fn check_range_len(&self, requested: u128) -> Result<(), Limit> {
        if requested > self.limits.max_range_len as u128 {
            return Err(self.trip(Limit::RangeLength {
                limit: self.limits.max_range_len,
                requested,
            }));
        }
        Ok(())
    }

    fn charge_output(&self, bytes: usize) -> Result<(), Limit> {
        let left = self.output_left.get();
        if bytes > left {
            return Err(self.trip(Limit::Output {
                limit: self.limits.max_output_bytes,
            }));
        }
        self.output_left.set(left - bytes);
        self.check_time()
    }
}

pub(crate) fn kind_slot(kind: TemplateKind) -> usize {
    match kind {
        TemplateKind::Config => 0,
        TemplateKind::Commands => 1,
    }
}

thread_local! {
    static ACTIVE: RefCell<Option<Rc<Budget>>> = const { RefCell::new(None) };
}

/// Installs `budget` for this thread until the guard drops.
pub(crate) struct ActiveBudget {
    previous: Option<Rc<Budget>>,
}

impl ActiveBudget {
    pub(crate) fn install(budget: Rc<Budget>) -> ActiveBudget {
        let previous = ACTIVE.with(|slot| slot.replace(Some(budget)));
        ActiveBudget { previous }
    }
}

impl Drop for ActiveBudget {
    fn drop(&mut self) {
        ACTIVE.with(|slot| *slot.borrow_mut() = self.previous.take());
    }
}

/// Runs `f` with the active budget; the sandbox's functions only ever run inside a
/// render, so a missing budget is an internal error reported, not a panic.
pub(crate) fn with_active<T>(f: impl FnOnce(&Budget) -> tera::Result<T>) -> tera::Result<T> {
    let budget = ACTIVE.with(|slot| slot.borrow().clone());
    match budget {
        Some(budget) => f(&budget),
        None => Err(tera::Error::msg(
            "internal error: a sandbox function ran outside a render",
        )),
    }
}

pub(crate) fn limit_error(limit: Limit) -> tera::Error {
    tera::Error::msg(format!("exceeded {limit}"))
}

/// Collects a render's output and stops it once the output budget is spent, so an
/// output bomb ends at the limit instead of after filling memory.
pub(crate) struct BoundedWriter {
    pub(crate) buf: Vec<u8>,
    budget: Rc<Budget>,
}

impl BoundedWriter {
    pub(crate) fn new(budget: Rc<Budget>) -> BoundedWriter {
        BoundedWriter {
            buf: Vec::new(),
            budget,
        }
    }
}

impl io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.budget
            .charge_output(data.len())
            .map_err(|limit| io::Error::other(limit.to_string()))?;
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
