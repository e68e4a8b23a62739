"""The group tree of a store: each array's role and the tables each group splits into."""
