"""memcore: the memory domain. Pure Python + pydantic; never imports ray."""
