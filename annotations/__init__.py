"""Vendor profiles (the rules each vendor supports), installed as ``byoc.annotations``."""
