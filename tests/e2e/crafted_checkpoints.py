# Writes crafted copies of a valid trident checkpoint, one defect each, for the readers' tests.
"""usage: crafted_checkpoints.py VALID.h5 OUT_DIR

Each case is OUT_DIR/<case>.h5 and a line "<case> <field>" on stdout: the field a reader must
name when it refuses the file. Families so far: attributes with the wrong number of values (an
array where trident writes a scalar, none at all), the wrong class (a string where a number
belongs and the reverse), an oversized string, a stored config with values a config file is
refused for, tensors of another shape, dtype or rank, soft and external links, no parameters,
and counters out of range or inconsistent (a
negative or huge step or data cursor, more AdamW steps than steps, a loss scale that is not a
finite positive number).
"""
import shutil
import sys

import h5py
import numpy as np

INTS = ["format_version", "step", "data_cursor", "adam_steps", "seed", "loss_scale_clean_steps",
        "loss_scale_hysteresis_left"]
DOUBLES = ["loss_scale"]
STRINGS = ["config", "layout", "git_revision", "data_identity"]
CHECKSUM = "params/wte"  # a dataset whose "checksum" attribute verify reads
# Enough values that reading them into room for one overruns it, and few enough for an attribute
# in the object header (64 KiB) of a file trident wrote.
MANY = 4096


def crafted(valid, out, case, field, change, named=None):
    """Writes case: valid with attribute `field` replaced by change(attrs, field); `named` is what
    a refusal must name (the attribute itself by default)."""
    path = f"{out}/{case}.h5"
    shutil.copyfile(valid, path)
    with h5py.File(path, "r+") as f:
        obj = f[CHECKSUM] if field == "checksum" else f
        del obj.attrs[field]
        change(obj.attrs, field)
    print(case, named or field)


def main():
    valid, out = sys.argv[1], sys.argv[2]
    for field in INTS + ["checksum"]:
        crafted(valid, out, f"{field}_int_array", field,
                lambda a, k: a.create(k, np.arange(MANY, dtype=np.int64)))
        crafted(valid, out, f"{field}_empty", field, lambda a, k: a.create(k, h5py.Empty("i8")))
        crafted(valid, out, f"{field}_string", field, lambda a, k: a.create(k, "12"))
        crafted(valid, out, f"{field}_float", field, lambda a, k: a.create(k, np.float64(2.5)))
    for field in DOUBLES:
        crafted(valid, out, f"{field}_double_array", field,
                lambda a, k: a.create(k, np.ones(MANY, dtype=np.float64)))
        crafted(valid, out, f"{field}_string", field, lambda a, k: a.create(k, "1.0"))
    vlen = h5py.string_dtype("utf-8")
    for field in STRINGS:
        crafted(valid, out, f"{field}_vlen_array", field,
                lambda a, k: a.create(k, np.array(["x"] * (MANY // 4), dtype=object), dtype=vlen))
        crafted(valid, out, f"{field}_fixed_array", field,
                lambda a, k: a.create(k, np.array([b"abcdefgh"] * (MANY // 2), dtype="S8")))
        crafted(valid, out, f"{field}_int", field, lambda a, k: a.create(k, np.int64(7)))
    for field, value in [("step", -1000), ("data_cursor", -1000), ("data_cursor", 1 << 62),
                         ("adam_steps", -3), ("adam_steps", 3), ("loss_scale_clean_steps", -1),
                         ("loss_scale_hysteresis_left", -1)]:
        crafted(valid, out, f"{field}_{value}".replace("-", "minus"), field,
                lambda a, k, v=value: a.create(k, np.int64(v)))
    for value in ["inf", "nan", "0", "-1024"]:
        crafted(valid, out, f"loss_scale_{value}".replace("-", "minus"), "loss_scale",
                lambda a, k, v=value: a.create(k, np.float64(float(v))))
    # The stored config: values a config file is refused for (the model's sizes decide what every
    # reader allocates); the refusal names the key.
    with h5py.File(valid, "r") as f:
        config = f.attrs["config"]
    for key, old, new in [("model.n_head", "n_head = 4", "n_head = 0"),
                          ("model.n_layer", "n_layer = 4", "n_layer = -4"),
                          ("model.n_layer", "n_layer = 4", "n_layer = 2000000000"),
                          ("model.n_embd", "n_embd = 32", "n_embd = 2000000000"),
                          ("dp", "\ndp = 1\n", "\ndp = 0\n"),
                          ("model.vocab_size", "vocab_size = 256", "vocab_size = 1")]:
        assert old in config, old
        case = "config_" + new.strip().replace(" = ", "_").replace("-", "minus")
        crafted(valid, out, case, "config",
                lambda a, k, text=config.replace(old, new, 1): a.create(k, text, dtype=vlen), key)
    # Tensors: another shape, dtype or rank than the stored config's model has, a soft or external
    # link in a tensor's place (one could pull data from any HDF5 file on the host), and no
    # parameters at all.
    def tensor(case, named, change):
        path = f"{out}/{case}.h5"
        shutil.copyfile(valid, path)
        with h5py.File(path, "r+") as f:
            change(f)
        print(case, named)

    def replace(f, name, data):
        checksum = f[name].attrs["checksum"]
        del f[name]
        f[name] = data
        f[name].attrs["checksum"] = checksum

    with h5py.File(valid, "r") as f:
        wte = f["params/wte"][...]
    tensor("wte_larger", "params/wte",
           lambda f: replace(f, "params/wte", np.zeros((2 * wte.shape[0], wte.shape[1]), "f4")))
    tensor("wte_flat", "params/wte", lambda f: replace(f, "params/wte", wte.reshape(-1)))
    tensor("wte_int32", "params/wte", lambda f: replace(f, "params/wte", wte.astype("i4")))
    tensor("wte_float64", "params/wte", lambda f: replace(f, "params/wte", wte.astype("f8")))
    tensor("wte_soft_link", "params/wte",
           lambda f: (f.__delitem__("params/wte"), f.__setitem__("params/wte",
                                                                 h5py.SoftLink("/optim/m/wte"))))
    tensor("wte_external_link", "params/wte",
           lambda f: (f.__delitem__("params/wte"),
                      f.__setitem__("params/wte", h5py.ExternalLink(valid, "/params/wte"))))
    tensor("params_external_link", "params",
           lambda f: (f.__delitem__("params"),
                      f.__setitem__("params", h5py.ExternalLink(valid, "/params"))))
    tensor("no_params", "params", lambda f: f.__delitem__("params"))
    # A variable-length string longer than the readers' bound (16 MiB; it lives in the file's
    # heap, not in the object header).
    crafted(valid, out, "config_vlen_huge", "config",
            lambda a, k: a.create(k, "#" * (17 << 20), dtype=vlen))


if __name__ == "__main__":
    main()
