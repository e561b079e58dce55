"""What Beam's workers run for our components stays light to import, and names TFX's
output files as TFX does."""

import subprocess
import sys

from components.custom import beam_fns


def test_the_worker_code_names_output_files_as_tfx_does():
    from tfx.components.example_gen import write_split

    assert beam_fns.DEFAULT_FILE_NAME == write_split.DEFAULT_FILE_NAME
    assert beam_fns.output_name(3, 12) == f"{write_split.DEFAULT_FILE_NAME}-00003-of-00012.gz"


def test_a_worker_unpickling_our_dofns_does_not_import_tfx():
    """Each worker process of each job imports the module of every DoFn it unpickles;
    TFX's API would add seconds to every one of them."""
    import cloudpickle

    pickled = cloudpickle.dumps([beam_fns.SplitFile(["/a", "/b"], [4, 5], 2), beam_fns.CopyFile("/a", 1),
                                 beam_fns.ReadSpanFile(None, 0.5), beam_fns.by_span, beam_fns.write_split_rows])
    loaded = subprocess.run(
        [sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
                               "print(sorted(m for m in sys.modules if m == 'tfx' or m.startswith('tfx.')))"],
        input=pickled, capture_output=True, check=True,
    )
    assert loaded.stdout.decode().strip() == "[]"
    assert b"components.custom.beam_fns" in pickled


def test_the_split_rows_are_summed_by_split_and_a_split_without_rows_is_recorded(tmp_path):
    from components.model import split_rows

    beam_fns.write_split_rows([(0, 7), (2, 0), (0, 5)], str(tmp_path), ["train", "eval", "holdout"])
    assert split_rows.read(str(tmp_path)) == {"eval": 0, "holdout": 0, "train": 12}
