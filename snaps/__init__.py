"""What runs inside an installed inference snap: the engine manager CLI, hooks and launcher."""
