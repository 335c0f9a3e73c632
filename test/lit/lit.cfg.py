# lit configuration for moec's command-line tests.
import os
import sys
import lit.formats

config.name = "moec"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".moe", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moec_obj_root, "test", "lit")

moec = os.path.join(config.moec_obj_root, "tools", "moec", "moec")
# The one way a test states an exit status: %expect-exit STATUS CMD... fails
# unless CMD exits with exactly STATUS (moec's 0 clean, 1 errors, 2 could not
# run are told apart, which lit's `not` does not), without a signal, a hang
# or crash text (Inputs/expect-exit.py).
config.substitutions.append(
    ("%expect-exit", '"%s" "%s"' % (sys.executable, os.path.join(os.path.dirname(__file__), "Inputs", "expect-exit.py"))))
config.substitutions.append(("%moec", moec))
config.substitutions.append(("%mkdata", os.path.join(config.moec_obj_root, "tools", "moerun-mkdata", "moerun-mkdata")))
config.substitutions.append(("%examples", os.path.join(config.moec_src_root, "examples")))
config.substitutions.append(("%srcroot", config.moec_src_root))
config.substitutions.append(("%python", sys.executable))
config.environment["PATH"] = os.pathsep.join([config.llvm_tools_dir, config.environment.get("PATH", "")])
# FileCheck, not, count and split-file come from LLVM 14's tools directory.
# Diagnostics must not depend on the terminal.
config.environment["TERM"] = "dumb"
# `moec run` tests that launch MPI jobs need mpirun.
import shutil
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
# What a plan made for a GPU does by default depends on whether this machine
# has one (nvidia-smi stands for the driver).
if not shutil.which("nvidia-smi"):
    config.available_features.add("no-gpu")
# The report's browser test renders pages in headless Chromium (Debian's
# `chromium` package, scripts/setup.sh); without it that test is UNSUPPORTED.
if shutil.which("chromium"):
    config.available_features.add("chromium")
else:
    lit_config.note("chromium not found: report/browser.test is skipped (UNSUPPORTED); "
                    "install Debian's chromium package to run it")
