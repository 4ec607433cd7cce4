__spine_prepare('for key in inputs["keys"]: lookup(key=key)')
total = 0
for key in inputs['keys']:
    total += lookup(key=key)
print('items:', len(inputs['keys']))
total
