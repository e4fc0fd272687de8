"""Where meson finds Slurm and where the plugin goes (the admin guide's three
cases beside Debian's package, which every other build here uses):
  - a Slurm built from source into its own prefix: -Dslurm_prefix=DIR;
  - an RPM-style installation that ships slurm.pc: pkg-config slurm;
  - bad -Dslurm_prefix values: an error naming the option, the value and what
    was expected.
Each case configures this source tree into a scratch build directory with only
the plugin enabled. The prefix's headers are this machine's Slurm headers with
a distinct micro version (.99), so that the version meson reports and the
plugin_version the built plugin carries prove which headers were used.

usage: slurm_locations_test.py SOURCE_DIR"""
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else None
SYSTEM_HEADERS = "/usr/include/slurm"
MINIMAL = ["-Dslurm=enabled", "-Dtests=disabled", "-Dpython=disabled", "-Dexamples=disabled",
           "-Dbenchmarks=disabled", "-Dcuda=disabled", "-Dgloo=disabled", "-Dmpi=disabled",
           "-Dpmix=disabled", "-Dprefix=/usr", "-Dsysconfdir=/etc"]


def fake_slurm(prefix, libdir):
    """This machine's Slurm headers under PREFIX/include/slurm, micro version 99."""
    inc = os.path.join(prefix, "include", "slurm")
    shutil.copytree(SYSTEM_HEADERS, inc)
    path = os.path.join(inc, "slurm_version.h")
    text = open(path).read()
    m = re.search(r"#define SLURM_VERSION_NUMBER 0x([0-9a-fA-F]{6})", text)
    number = (int(m.group(1), 16) & ~0xff) | 99
    open(path, "w").write(text.replace(m.group(0), "#define SLURM_VERSION_NUMBER 0x%06x" % number))
    os.makedirs(os.path.join(prefix, libdir, "slurm"))
    return number


def meson(*args, env=None):
    return subprocess.run(["meson", *args], capture_output=True, text=True, env=env)


class SlurmLocations(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="slurm-locations-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def setup_build(self, *options, env=None):
        build = os.path.join(self.tmp, "build")
        r = meson("setup", build, SOURCE, *MINIMAL, *options, env=env)
        return build, r

    def installed_plugin(self, build):
        installed = json.loads(meson("introspect", build, "--installed").stdout)
        return [dest for dest in installed.values() if dest.endswith("/spank_ddp.so")]

    def snippet(self, build):
        return open(os.path.join(build, "slurm-conf-samples", "slurm-ddp.conf")).read()

    def built_plugin_version(self, build):
        r = subprocess.run(["ninja", "-C", build, "plugin/spank_ddp.so"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lib = ctypes.CDLL(os.path.join(build, "plugin", "spank_ddp.so"), mode=os.RTLD_LAZY)
        return ctypes.c_uint.in_dll(lib, "plugin_version").value

    def test_slurm_built_from_source_into_its_own_prefix(self):
        prefix = os.path.join(self.tmp, "opt", "slurm")
        number = fake_slurm(prefix, "lib64")
        build, r = self.setup_build("-Dslurm_prefix=" + prefix)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        version = "%d.%02d.99" % (number >> 16, number >> 8 & 255)
        self.assertIn("Slurm %s (slurm_prefix=%s)" % (version, prefix), r.stdout)
        plugin = os.path.join(prefix, "lib64", "slurm", "spank_ddp.so")
        self.assertEqual(self.installed_plugin(build), [plugin])
        self.assertIn("\nrequired %s\n" % plugin, self.snippet(build))
        self.assertEqual(self.built_plugin_version(build), number)

    def test_slurm_pc_gives_the_headers_and_the_plugin_directory(self):
        site = os.path.join(self.tmp, "site")
        number = fake_slurm(site, "lib")
        pcdir = os.path.join(self.tmp, "pkgconfig")
        os.makedirs(pcdir)
        with open(os.path.join(pcdir, "slurm.pc"), "w") as f:
            f.write("libdir=%s/lib\nincludedir=%s/include\n\nName: slurm\nDescription: Slurm\n"
                    "Version: %d.%d.99\nCflags: -I${includedir}\nLibs: -L${libdir} -lslurm\n"
                    % (site, site, number >> 16, number >> 8 & 255))
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
        build, r = self.setup_build(env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"Slurm \d+\.\d+\.99 \(pkg-config slurm ")
        plugin = os.path.join(site, "lib", "slurm", "spank_ddp.so")
        self.assertEqual(self.installed_plugin(build), [plugin])
        self.assertIn("\nrequired %s\n" % plugin, self.snippet(build))
        # Slurm's library is never linked: srun and slurmstepd carry it.
        self.assertEqual(self.built_plugin_version(build), number)
        needed = subprocess.run(["readelf", "-d", os.path.join(build, "plugin", "spank_ddp.so")],
                                capture_output=True, text=True).stdout
        self.assertNotIn("libslurm", needed)

    def test_a_relative_prefix_is_refused_by_name(self):
        _, r = self.setup_build("-Dslurm_prefix=opt/slurm")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("slurm_prefix='opt/slurm': expected an absolute directory", r.stdout + r.stderr)

    def test_a_prefix_without_headers_is_refused_by_name(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        _, r = self.setup_build("-Dslurm_prefix=" + empty)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("slurm_prefix='%s': %s/include/slurm/spank.h does not exist" % (empty, empty),
                      r.stdout + r.stderr)


if __name__ == "__main__":
    if SOURCE is None or not os.path.isfile(os.path.join(SYSTEM_HEADERS, "spank.h")):
        print("usage: slurm_locations_test.py SOURCE_DIR (with Slurm's headers in %s)"
              % SYSTEM_HEADERS, file=sys.stderr)
        sys.exit(1)
    unittest.main(verbosity=2)
