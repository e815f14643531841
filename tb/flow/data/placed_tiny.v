module tiny(input clk, input [7:0] a, input [7:0] b, input we, output reg [7:0] q, output reg hit);
  reg [7:0] acc = 0, ra = 0, rb = 0;
  reg [7:0] mem [0:511];
  reg [8:0] wa = 0;
  reg [7:0] rd = 0;
  always @(posedge clk) begin
    ra <= a; rb <= b;
    acc <= acc + (ra ^ rb);
    hit <= (acc == rb) | (rd[3:0] == ra[7:4]);
    if (we) mem[wa] <= acc;
    wa <= wa + 1;
    rd <= mem[{ra, 1'b0}];
    q <= rd + acc;
  end
endmodule
