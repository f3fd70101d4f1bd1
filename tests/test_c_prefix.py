"""compile --emit c --prefix: two models under different prefixes link into one program and both
match onnxruntime; the C API states its contract; the Makefile builds as the host runner does."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from opfuse.backends.c import emit_c
from opfuse.backends.c.flags import BASE, WARN
from opfuse.cli import cli
from opfuse.errors import OpfuseError
from opfuse.measure.run.host import CModel, compiler
from opfuse.measure.validate.c_float import reference
from opfuse.measure.validate.ort import compare
from opfuse.measure.validate.per_kernel import per_kernel
from opfuse.pipeline import compile_model

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

MODELS = {"kws": "ds_cnn", "blk": "seed_block"}

MAIN = r"""#include <stdio.h>
#include "kws/model.h"
#include "blk/model.h"

static int run(const char *in, const char *out, void *x, long nx, const void *y, long ny,
               int (*invoke)(void)) {
    FILE *f = fopen(in, "rb");
    if (!f || fread(x, sizeof(float), (size_t)nx, f) != (size_t)nx) return 1;
    fclose(f);
    invoke();
    f = fopen(out, "wb");
    if (!f || fwrite(y, sizeof(float), (size_t)ny, f) != (size_t)ny) return 1;
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    /* both arenas live at once: run one model, then the other, then the first again */
    if (run(argv[1], argv[2], kws_model_input(0), KWS_INPUT_SIZE, kws_model_output(0),
            KWS_OUTPUT_SIZE, kws_model_invoke)) return 1;
    if (run(argv[3], argv[4], blk_model_input(0), BLK_INPUT_SIZE, blk_model_output(0),
            BLK_OUTPUT_SIZE, blk_model_invoke)) return 1;
    return run(argv[1], argv[2], kws_model_input(0), KWS_INPUT_SIZE, kws_model_output(0),
               KWS_OUTPUT_SIZE, kws_model_invoke);
}
"""


def test_two_prefixed_models_link_into_one_program(tmp_path: Path) -> None:
    sources = [tmp_path / "main.c"]
    (tmp_path / "main.c").write_text(MAIN)
    refs, files = {}, []
    for prefix, name in MODELS.items():
        result = compile_model(name)
        emit_c(result, tmp_path / prefix, prefix=prefix)
        sources += [tmp_path / prefix / "model.c", tmp_path / prefix / "weights.c"]
        feeds, ref, _ = reference(result.source, None, 0, result.input_shapes)
        (x,), (y,) = feeds.values(), ref.values()
        x.astype("<f4").tofile(tmp_path / f"{prefix}.in")
        refs[prefix] = y
        files += [str(tmp_path / f"{prefix}.in"), str(tmp_path / f"{prefix}.out")]
        text = (tmp_path / prefix / "model.c").read_text() + (tmp_path / prefix / "model.h").read_text()
        assert not re.search(r"\bopfuse_|\bOPFUSE_", text)
    exe = tmp_path / "two"
    subprocess.run([compiler(), *BASE, *WARN, "-o", str(exe), *map(str, sources), "-lm"],
                   check=True, capture_output=True, text=True)
    symbols = subprocess.run(["nm", "-g", "--defined-only", str(exe)], capture_output=True,
                             text=True).stdout
    assert "kws_model_invoke" in symbols and "blk_model_invoke" in symbols
    subprocess.run([str(exe), *files], check=True)
    for prefix, y in refs.items():
        got = np.fromfile(tmp_path / f"{prefix}.out", "<f4").reshape(y.shape)
        assert compare(prefix, y, got, 1e-4, 1e-4).ok


def test_prefixed_model_runs_through_the_host_runner(tmp_path: Path) -> None:
    result = compile_model("ds_cnn")
    res = CliRunner().invoke(cli, ["compile", "ds_cnn", "--emit", "c", "--prefix", "kws",
                                   "-o", str(tmp_path / "kws")])
    assert res.exit_code == 0, res.output
    assert "KWS_ARENA_BYTES" in res.output
    feeds, ref, _ = reference(result.source, None, 0, result.input_shapes)
    got = CModel(tmp_path / "kws").run(feeds)
    assert all(compare(k, v, got[k], 1e-4, 1e-4).ok for k, v in ref.items())
    assert per_kernel(result, tmp_path / "kws", feeds, emit=False).ok  # its debug hook too


@pytest.mark.parametrize("bad", ["1abc", "a-b", ""])
def test_prefix_must_be_an_identifier(bad: str, tmp_path: Path) -> None:
    with pytest.raises(OpfuseError, match="--prefix"):
        emit_c(compile_model("seed_block"), tmp_path / "c", prefix=bad)
    assert not (tmp_path / "c").exists()


def test_contract_and_makefile_flags(tmp_path: Path) -> None:
    emit_c(compile_model("seed_block"), tmp_path / "c")
    header = (tmp_path / "c" / "model.h").read_text()
    readme = (tmp_path / "c" / "README.md").read_text()
    for text in (header, readme):
        words = " ".join(text.replace("   ", " ").split())
        assert "not reentrant and not thread-safe" in words, words
        assert "--prefix NAME" in words and "before each opfuse_model_invoke()" in words
    makefile = (tmp_path / "c" / "Makefile").read_text()
    flags = re.search(r"^CFLAGS \?= (.*)$", makefile, re.M).group(1).split()
    assert set(WARN) <= set(flags) and "-ffast-math" not in flags
    if shutil.which("make"):
        subprocess.run(["make", "-s"], cwd=tmp_path / "c", check=True, capture_output=True)
