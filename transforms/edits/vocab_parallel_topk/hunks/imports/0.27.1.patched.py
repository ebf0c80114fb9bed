from collections.abc import Callable
from functools import cache
