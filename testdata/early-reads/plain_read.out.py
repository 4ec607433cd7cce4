price = lookup(key='book')
result = price * inputs['quantity']
