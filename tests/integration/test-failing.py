print("1..0 # SKIP not yet written")
