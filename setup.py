"""Builds the typed hot modules listed in broker/native.py with mypyc (issue 22.5), and the
hand-written C extensions listed there (gcc and the Python headers).

``pip install`` (and ``pip install -e .``) compiles them into .so files beside their sources;
``RMQPY_PURE_PYTHON=1`` at install time builds nothing (pure Python, same behaviour). Everything
else about the package is in pyproject.toml.
"""
import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent


def _native():
    spec = importlib.util.spec_from_file_location("_rmqpy_native", HERE / "broker" / "native.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def native_modules() -> list:
    return [name.replace(".", "/") + ".py" for name in _native().NATIVE_MODULES]


def c_extensions() -> list:
    """The hand-written C extensions (broker/native.py NATIVE_C_EXTENSIONS), built beside their .c."""
    return [Extension(name, [name.replace(".", "/") + ".c"], extra_compile_args=["-O2", "-Wall"])
            for name in _native().NATIVE_C_EXTENSIONS]


ext_modules = []
if os.environ.get("RMQPY_PURE_PYTHON") != "1":
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.exit("setup.py: mypyc is not installed in the build environment (it comes with mypy, a build "
                 "requirement in pyproject.toml); install it, or set RMQPY_PURE_PYTHON=1 for a pure-Python install")
    os.chdir(HERE)  # mypycify takes paths relative to the project
    ext_modules = mypycify(native_modules(), opt_level="3", debug_level="0") + c_extensions()

setup(ext_modules=ext_modules)
