"""Probing tools for the CUDA decode kernel (run from a checkout; not part of the installed package).

See tools/README.md.
"""
