print("sharesync-bench: no scenarios yet")
