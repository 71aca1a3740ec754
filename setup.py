# Shim for tools that still want setup.py (Beam's --setup_file ships the package to Dataflow workers).
from setuptools import setup

setup()
