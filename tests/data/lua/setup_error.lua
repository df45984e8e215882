-- Fails while setting up.
error("bad configuration")
