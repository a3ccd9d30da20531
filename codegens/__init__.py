"""Reference external codegens, installed as ``byoc.codegens``."""
