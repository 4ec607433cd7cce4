# A read in a loop over data: every iteration's read starts at once.
total = 0
for key in inputs["keys"]:
    total += lookup(key=key)
print("items:", len(inputs["keys"]))
total
