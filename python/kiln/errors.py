"""kiln's exceptions. Every error kiln raises is a KilnError, in one line that names the
Python file and line that built the failing node where there is one."""


class KilnError(Exception):
    """An error kiln reports: a bad graph, a bad call, a failed compile."""


class TypeError(KilnError, TypeError):  # noqa: A001 - kiln.TypeError is a TypeError
    """A node that cannot be built: dtypes or shapes that do not fit the op, a bad argument."""


class ShapeError(KilnError, ValueError):
    """A call whose arrays do not fit the function: a wrong shape, count or extent."""
